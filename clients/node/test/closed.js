// Run by tests/api/test_node.py: a client closed (twice: no error) refuses every later call,
// CANCELLED "pml: the client is closed", sending nothing; prints what each call did and the
// executions a fresh client then counts on the server.
// Usage: node test/closed.js TARGET
"use strict";

const grpc = require("@grpc/grpc-js");
const { PmlClient, newRecord } = require("..");

async function main() {
  const target = process.argv[2];
  const pml = new PmlClient(target, { timeoutMs: 3000 });
  await pml.stats(); // connected
  pml.close();
  pml.close();
  const out = {};
  const record = () => newRecord("Read JSON", "await mcp.read_file({path: 'a'})");
  const calls = {
    stats: () => pml.stats(),
    record: () => pml.record(record()),
    upload: () => pml.upload([record()], { maxReconnects: 1 }),
  };
  for (const [name, call] of Object.entries(calls)) {
    try {
      await call();
      out[name] = "answered";
    } catch (err) {
      out[name] = { code: grpc.status[err.code], message: err.message };
    }
  }
  const fresh = new PmlClient(target);
  out.executions = (await fresh.stats()).executions;
  fresh.close();
  console.log(JSON.stringify(out));
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
