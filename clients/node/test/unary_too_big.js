// Run by tests/api/test_node.py against a server with --max-message-bytes 65536: a record
// over the limit is refused RESOURCE_EXHAUSTED without RetryInfo, which no wait cures, so it is
// sent once by `call`; `record` does not send it, refusing it RESOURCE_EXHAUSTED naming `record`
// (as `upload` and the Python client). Prints {sent, code, retryDelayMs, record: {sent, code,
// fields, message}}.
// Usage: node test/unary_too_big.js HOST:PORT
"use strict";

const { PmlClient, newRecord, errorDetails } = require("..");

async function main(target) {
  const pml = new PmlClient(target, { maxRetries: 3 });
  let sent = 0;
  const recordExecution = pml.raw.RecordExecution.bind(pml.raw);
  pml.raw.RecordExecution = (...args) => {
    sent += 1;
    return recordExecution(...args);
  };
  const big = newRecord("big", "x".repeat(100000), "typescript", [{ tool: "t", ok: true }]);
  let refused = null;
  try {
    await pml.call("RecordExecution", { record: big });
  } catch (err) {
    refused = err;
  }
  const out = { sent, code: refused && refused.code, retryDelayMs: refused && errorDetails(refused).retryDelayMs };
  sent = 0;
  try {
    await pml.record(big);
    out.record = "sent";
  } catch (err) {
    const fields = errorDetails(err).fieldViolations.map((v) => v.field);
    out.record = { sent, code: err.code, fields, message: err.message };
  }
  pml.close();
  return out;
}

main(process.argv[2]).then(
  (summary) => process.stdout.write(JSON.stringify(summary) + "\n"),
  (err) => {
    process.stderr.write(`unary_too_big failed: ${err.stack || err}\n`);
    process.exit(1);
  },
);
