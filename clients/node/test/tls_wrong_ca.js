// Run by tests/api/test_node.py: a server whose certificate the client's caFile did not sign,
// one that asks for a client certificate the client has none of (mutual TLS), one in plaintext
// for a client with a caFile, or one speaking TLS for a client without (CAFILE ""). Prints
// {stats: {code, message, attempts}, upload: {code, message}}: each is never retried, and says
// so naming the options.
// Usage: node test/tls_wrong_ca.js TARGET CAFILE
"use strict";

const grpc = require("@grpc/grpc-js");
const { PmlClient, newRecord } = require("..");

async function main() {
  const [target, caFile] = process.argv.slice(2);
  const pml = new PmlClient(target, { caFile: caFile || undefined, timeoutMs: 5000 });
  let attempts = 0;
  const getStats = pml.raw.GetStats.bind(pml.raw);
  pml.raw.GetStats = (...args) => {
    attempts += 1;
    return getStats(...args);
  };
  const out = {};
  try {
    await pml.stats();
    out.stats = "answered";
  } catch (err) {
    out.stats = { code: grpc.status[err.code], message: err.message, attempts };
  }
  try {
    await pml.upload([newRecord("Read JSON", "await mcp.read_file({path: 'a'})")], { maxReconnects: 3 });
    out.upload = "answered";
  } catch (err) {
    out.upload = { code: grpc.status[err.code], message: err.message };
  }
  pml.close();
  console.log(JSON.stringify(out));
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
