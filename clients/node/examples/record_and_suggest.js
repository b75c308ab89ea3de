// Example of the pml Node package: records three executions (two with RecordExecution, one over
// StreamTraces), asks Suggest, and reads the BadRequest details of a refused call.
// Usage: node examples/record_and_suggest.js HOST:PORT   (API key, if any, in $PML_API_KEY)
// Prints a JSON summary on stdout (tests/api/test_node.py reads it).
"use strict";

const { PmlClient, newRecord, errorDetails } = require("..");

function readRecord(intent, file) {
  return newRecord(
    intent,
    `const d = await mcp.read_file({path: "${file}"}); return await mcp.parse_json(d)`,
    "typescript",
    [
      { tool: "read_file", ok: true, arguments_json: JSON.stringify({ path: file }) },
      { tool: "parse_json", ok: true },
    ],
  );
}

async function main(target) {
  const pml = new PmlClient(target);
  try {
    const outcomes = [];
    for (const [intent, file] of [["Read JSON file", "a.json"], ["Parse JSON from disk", "b.json"]]) {
      outcomes.push((await pml.record(readRecord(intent, file))).outcome);
    }
    const report = await pml.upload([readRecord("Load JSON data", "c.json")]);
    for (const ack of report.acks.values()) outcomes.push(ack.result.outcome);

    const best = (await pml.suggest({ intent: "Load JSON data", page_size: 3 })).suggestions[0];
    let refused = null;
    try {
      await pml.suggest({ intent: "" });
    } catch (err) {
      const details = errorDetails(err);
      refused = { code: details.code, details: details.typeUrls, fields: details.fieldViolations.map((v) => v.field) };
    }
    return {
      outcomes,
      best: best && {
        capability: best.capability,
        tools: best.pattern.tools_used,
        usage: best.pattern.usage_count,
        score: best.score,
      },
      refused,
    };
  } finally {
    pml.close();
  }
}

module.exports = { main };

if (require.main === module) {
  const target = process.argv[2];
  if (!target) {
    process.stderr.write("usage: node examples/record_and_suggest.js HOST:PORT\n");
    process.exit(2);
  }
  main(target).then(
    (summary) => process.stdout.write(JSON.stringify(summary) + "\n"),
    (err) => {
      process.stderr.write(`pml node client failed: ${err.stack || err}\n`);
      process.exit(1);
    },
  );
}
