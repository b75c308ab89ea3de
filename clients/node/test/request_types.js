// Run by tests/api/test_node.py: a request field given a value of another type, or a string
// that is not Unicode text, is refused INVALID_ARGUMENT naming the field (a BadRequest
// violation, as the server's and the Python client's), nothing sent. protobufjs's fromObject,
// which grpc-js serializes with, coerced them: `ok: "false"` was recorded true. Prints
// {case: {code, fields, message}}, the outcome of a record that is taken, and the server's
// execution count.
// Usage: node test/request_types.js HOST:PORT
"use strict";

const { PmlClient, newRecord, errorDetails } = require("..");

async function main(target) {
  const pml = new PmlClient(target, { maxRetries: 0 });
  const record = (intent, calls) => newRecord(intent, "await mcp.read_file({})", "typescript", calls);
  const cases = {
    flaggedText: () => pml.suggest({ intent: "Load JSON", include_flagged: "no" }),
    intentNumber: () => pml.suggest({ intent: 5 }),
    pageSizeText: () => pml.suggest({ intent: "x", page_size: "5" }),
    pageSizeNaN: () => pml.suggest({ intent: "x", page_size: NaN }),
    pageSizeInfinity: () => pml.suggest({ intent: "x", page_size: Infinity }),
    pageSizeFraction: () => pml.suggest({ intent: "x", page_size: 2.5 }),
    minMatchText: () => pml.suggest({ intent: "x", min_match: "0.5" }),
    toolsText: () => pml.suggest({ intent: "x", available_tools: "read_file" }),
    toolsArray: () => pml.suggest({ intent: "x", available_tools: ["read_file"] }),
    toolsInnerText: () => pml.suggest({ intent: "x", available_tools: { tools: "read_file" } }),
    tagNumber: () => pml.suggest({ intent: "x", tags: ["io", 5] }),
    camelCase: () => pml.suggest({ intent: "x", pageSize: 3 }),
    loneSurrogate: () => pml.suggest({ intent: "read \ud800 file" }),
    previousTool: () => pml.suggest({ intent: "", context: { previous_tools: ["a", "b\udcff"] } }),
    okText: () => pml.record(record("Read JSON", [{ tool: "read_file", ok: "false" }])),
    toolNull: () => pml.record(record("Read JSON", [null])),
    recordSurrogate: () => pml.record(record("read \udcff", [{ tool: "read_file", ok: true }])),
    startDate: () => pml.call("RecordExecution", { record: { ...record("Read JSON", []), start_time: new Date() } }),
    nameNumber: () => pml.getPattern(5),
    // sent as apply: true, a retention applied (and deletes) when "false" was written
    applyText: () => pml.call("RunRetention", { apply: "false" }),
    statusUnknown: () => pml.record({ ...record("Read JSON", []), status: "DONE" }),
    upload: () => pml.upload([record("Read JSON a", []), record("read \ud800", []), record("Read JSON c", [])]),
    uploadOk: () => pml.upload([record("Read JSON a", [{ tool: "read_file", ok: 1 }])]),
  };
  const out = {};
  for (const [name, send] of Object.entries(cases)) {
    try {
      await send();
      out[name] = "sent";
    } catch (err) {
      const { fieldViolations } = errorDetails(err);
      out[name] = { code: err.code, fields: fieldViolations.map((v) => v.field), message: err.message };
    }
  }
  // what protobufjs reads exactly is taken: an object of a class, by its own keys; a 64-bit
  // integer as its decimal text
  class Step {
    constructor() {
      Object.assign(this, record("Read JSON", [{ tool: "read_file", ok: true }]));
      this.start_time = { seconds: "1700000000", nanos: 5 };
    }
  }
  out.took = (await pml.record(new Step())).outcome;
  out.executions = Number((await pml.stats()).executions);
  pml.close();
  console.log(JSON.stringify(out));
}

main(process.argv[2]);
