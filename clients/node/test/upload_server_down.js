// Run by tests/api/test_node.py with the address of a port nothing listens on: an upload
// waits for the connection at most timeoutMs per stream, then rejects UNAVAILABLE once the
// reconnects run out (it waited forever). Prints {code, message, reconnects}.
// Usage: node test/upload_server_down.js HOST:PORT
"use strict";

const { PmlClient, newRecord } = require("..");

async function main(target) {
  const pml = new PmlClient(target, { timeoutMs: 500, maxRetries: 0 });
  const out = {};
  try {
    await pml.upload([newRecord("Read JSON file", "x", "typescript")], { maxReconnects: 1 });
    out.code = "resolved";
  } catch (err) {
    out.code = err.code;
    out.message = err.message;
  } finally {
    pml.close();
  }
  console.log(JSON.stringify(out));
}

main(process.argv[2]);
