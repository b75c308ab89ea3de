// Run by tests/api/test_node.py against a server that acknowledges executions UNAVAILABLE (its
// index catching up after a start): uploads 20 records, then prints {reconnects, acks, errors,
// executions} (errors: the {code, message} of each acknowledgement carrying one).
// Usage: node test/upload_unavailable.js HOST:PORT [MAX_RECONNECTS]
"use strict";

const { PmlClient, newRecord } = require("..");

async function main(target, maxReconnects) {
  const pml = new PmlClient(target);
  const records = [];
  for (let i = 0; i < 20; i++) {
    const tool = `tool${i % 3}`;
    records.push(newRecord(`task ${i}`, `await mcp.${tool}({n: ${i}})`, "typescript", [{ tool, ok: true }]));
  }
  const options = maxReconnects === undefined ? {} : { maxReconnects: Number(maxReconnects) };
  const report = await pml.upload(records, options);
  const acks = records.map((r) => report.acks.get(r.request_id)).filter(Boolean);
  const summary = {
    reconnects: report.reconnects,
    acks: acks.length,
    errors: acks.filter((a) => a.error).map((a) => ({ code: a.error.code, message: a.error.message })),
    executions: null,
  };
  if (summary.errors.length === 0) summary.executions = (await pml.stats()).executions;
  pml.close();
  return summary;
}

main(process.argv[2], process.argv[3]).then(
  (summary) => process.stdout.write(JSON.stringify(summary) + "\n"),
  (err) => {
    process.stderr.write(`upload_unavailable failed: ${err.stack || err}\n`);
    process.exit(1);
  },
);
