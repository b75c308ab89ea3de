// Run by tests/api/test_node.py: records that are no array, or hold something that is no
// ExecutionRecord (or none that serializes), are refused INVALID_ARGUMENT naming it before
// anything is sent (a null threw "Cannot read properties of null"); two records under one
// request id, a frozen record without one (it cannot be given one) too. Prints [{code, message, fields}] per case (fields: the BadRequest's).
// Usage: node test/upload_not_records.js HOST:PORT
"use strict";

const { PmlClient, newRecord, errorDetails } = require("..");

async function main(target) {
  const pml = new PmlClient(target);
  const out = [];
  // a record that does not serialize, after one that does: it threw protobufjs's error, no
  // code, naming no record, with the first already written on a stream left open
  const unserializable = { ...newRecord("Read JSON file", "x", "typescript"), tool_calls: "read_file" };
  const cases = [
    [newRecord("Read JSON file", "x", "typescript"), null],
    [7],
    "records",
    [newRecord("Read JSON file", "x", "typescript"), unserializable],
    [{ ...newRecord("Read JSON file", "x", "typescript"), request_id: "r1" }, { ...newRecord("Read JSON", "y"), request_id: "r1" }],
    [newRecord("Read JSON file", "x", "typescript"), Object.freeze({ intent: "Read JSON", code: "y", language: "typescript" })],
  ];
  for (const records of cases) {
    try {
      await pml.upload(records);
      out.push({ code: "resolved" });
    } catch (err) {
      out.push({ code: err.code, message: err.message, fields: errorDetails(err).fieldViolations.map((v) => v.field) });
    }
  }
  out.push({ executions: Number((await pml.call("GetStats", {})).executions) });
  pml.close();
  console.log(JSON.stringify(out));
}

main(process.argv[2]);
