// Run by tests/api/test_node.py: two records under one request id are refused before anything
// is sent; prints {code, message, executions}.
// Usage: node test/upload_repeated_id.js HOST:PORT
"use strict";

const { PmlClient, newRecord } = require("..");

async function main(target) {
  const pml = new PmlClient(target);
  const a = newRecord("first", "await mcp.one()", "javascript", [{ tool: "one", ok: true }]);
  const b = newRecord("second", "await mcp.two()", "javascript", [{ tool: "two", ok: true }]);
  b.request_id = a.request_id;
  let refused = null;
  try {
    await pml.upload([a, b]);
  } catch (err) {
    refused = err;
  }
  const stats = await pml.stats();
  pml.close();
  return { code: refused && refused.code, message: refused && refused.message, executions: Number(stats.executions) };
}

main(process.argv[2]).then(
  (summary) => process.stdout.write(JSON.stringify(summary) + "\n"),
  (err) => {
    process.stderr.write(`upload_repeated_id failed: ${err.stack || err}\n`);
    process.exit(1);
  },
);
