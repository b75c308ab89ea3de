// Run by tests/api/test_node.py against a server with --max-message-bytes 65536: one record
// over the limit among three, then prints {refused, code, message, field, captured, reconnects}.
// Usage: node test/upload_too_big.js HOST:PORT
"use strict";

const { PmlClient, newRecord } = require("..");

async function main(target) {
  const pml = new PmlClient(target);
  const huge = newRecord("huge", "await mcp.h()", "javascript", [
    { tool: "h", ok: true, arguments_json: JSON.stringify({ x: "a".repeat(70000) }) },
  ]);
  const records = [
    newRecord("fits one", "await mcp.one()", "javascript", [{ tool: "one", ok: true }]),
    huge,
    newRecord("fits two", "await mcp.two()", "javascript", [{ tool: "two", ok: true }]),
  ];
  const report = await pml.upload(records);
  const refused = report.acks.get(huge.request_id);
  const stats = await pml.stats();
  pml.close();
  return {
    acks: report.acks.size,
    code: refused.error.code,
    message: refused.error.message,
    details: refused.error.details.map((d) => d.type_url),
    captured: [...report.acks.values()].filter((a) => a.result).length,
    executions: stats.executions,
    reconnects: report.reconnects,
  };
}

main(process.argv[2]).then(
  (summary) => process.stdout.write(JSON.stringify(summary) + "\n"),
  (err) => {
    process.stderr.write(`upload_too_big failed: ${err.stack || err}\n`);
    process.exit(1);
  },
);
