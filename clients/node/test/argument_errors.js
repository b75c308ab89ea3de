// Run by tests/api/test_node.py: every refusal of an argument the client takes itself (the
// constructor's target and options, TLS files included; a call's and an upload's options;
// `call`'s method) is a TypeError in the client's error tree: code INVALID_ARGUMENT and a
// google.rpc.BadRequest naming the argument (`errorDetails`), as a refused request is.
// Prints {case: [instanceof TypeError, errorDetails code, fields named, message]}; nothing is
// sent, so no server is needed.
// Usage: node test/argument_errors.js DIR (a directory holding not.pem, a file that is no PEM)
"use strict";

const path = require("node:path");
const { PmlClient, newRecord, errorDetails } = require("..");

const dir = process.argv[2];
const notPem = path.join(dir, "not.pem");
const TARGET = "127.0.0.1:1";

function shape(err) {
  const details = errorDetails(err);
  return [err instanceof TypeError, details.code, details.fieldViolations.map((v) => v.field), err.message];
}

async function main() {
  const out = {};
  const constructed = {
    targetEmpty: ["", {}],
    targetNumber: [50051, {}],
    targetUrl: ["http://127.0.0.1:50051", {}],
    targetPort: ["127.0.0.1:99999", {}],
    optionsNull: [TARGET, null],
    optionTypo: [TARGET, { timeout: 1000 }],
    timeoutZero: [TARGET, { timeoutMs: 0 }],
    retriesText: [TARGET, { maxRetries: "3" }],
    budgetNegative: [TARGET, { retryBudgetMs: -1 }],
    keyNotString: [TARGET, { apiKey: 5 }],
    keyNewline: [TARGET, { apiKey: "s3cr3t\nkey" }],
    tlsText: [TARGET, { tls: "no" }],
    caFileNumber: [TARGET, { caFile: 5 }],
    keyAlone: [TARGET, { keyFile: notPem }],
    caMissing: [TARGET, { caFile: path.join(dir, "missing.pem") }],
    caNotPem: [TARGET, { caFile: notPem }],
    pairNotPem: [TARGET, { certFile: notPem, keyFile: notPem }],
  };
  for (const [name, args] of Object.entries(constructed)) {
    try {
      new PmlClient(...args).close();
      out[name] = "took";
    } catch (err) {
      out[name] = shape(err);
    }
  }
  const pml = new PmlClient(TARGET, { timeoutMs: 1000 });
  const calls = {
    callMethod: () => pml.call("Nope", {}),
    callOptionTypo: () => pml.call("GetStats", {}, { timeoutMs: 5 }),
    callSignal: () => pml.stats({ signal: "stop" }),
    uploadReconnects: () => pml.upload([newRecord("Read JSON file", "x")], { maxReconnects: "5" }),
    uploadOnAck: () => pml.upload([newRecord("Read JSON file", "x")], { onAck: "log" }),
  };
  for (const [name, send] of Object.entries(calls)) {
    try {
      await send();
      out[name] = "resolved";
    } catch (err) {
      out[name] = shape(err);
    }
  }
  pml.close();
  console.log(JSON.stringify(out));
}

main();
