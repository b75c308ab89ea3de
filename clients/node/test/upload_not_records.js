// Run by tests/api/test_node.py: records that are no array, or hold something that is no
// ExecutionRecord, are refused INVALID_ARGUMENT naming it before anything is sent (a null
// threw "Cannot read properties of null"). Prints [{code, message}] per case.
// Usage: node test/upload_not_records.js HOST:PORT
"use strict";

const { PmlClient, newRecord } = require("..");

async function main(target) {
  const pml = new PmlClient(target);
  const out = [];
  for (const records of [[newRecord("Read JSON file", "x", "typescript"), null], [7], "records"]) {
    try {
      await pml.upload(records);
      out.push({ code: "resolved" });
    } catch (err) {
      out.push({ code: err.code, message: err.message });
    }
  }
  out.push({ executions: Number((await pml.call("GetStats", {})).executions) });
  pml.close();
  console.log(JSON.stringify(out));
}

main(process.argv[2]);
