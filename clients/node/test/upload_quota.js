// Run by tests/api/test_node.py against a server whose tenant may make one call a second: the
// upload's GetServerInfo spends it, so its stream is refused RESOURCE_EXHAUSTED with RetryInfo
// and opened again once that delay has passed. Prints {reconnects, acks, captured, executions}.
// Usage: node test/upload_quota.js HOST:PORT API_KEY
"use strict";

const { PmlClient, newRecord } = require("..");

async function main(target, apiKey) {
  const pml = new PmlClient(target, { apiKey });
  const records = [
    newRecord("Read JSON file", "await mcp.read_file({path: 'a'})", "typescript", [{ tool: "read_file", ok: true }]),
    newRecord("Load JSON data", "await mcp.read_file({path: 'b'})", "typescript", [{ tool: "read_file", ok: true }]),
  ];
  const report = await pml.upload(records);
  const captured = [...report.acks.values()].filter((a) => a.result).length;
  const stats = await pml.stats();
  pml.close();
  return { reconnects: report.reconnects, acks: report.acks.size, captured, executions: stats.executions };
}

main(process.argv[2], process.argv[3]).then(
  (summary) => process.stdout.write(JSON.stringify(summary) + "\n"),
  (err) => {
    process.stderr.write(`upload_quota failed: ${err.stack || err}\n`);
    process.exit(1);
  },
);
