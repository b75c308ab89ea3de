// Run by tests/api/test_node.py: bad arguments are refused naming them, and an onAck that
// throws rejects the upload instead of ending the process. Prints {case: message}.
// Usage: node test/bad_arguments.js HOST:PORT
"use strict";

const { PmlClient, newRecord, errorDetails } = require("..");

async function main(target) {
  const out = {};
  const options = {
    timeoutZero: { timeoutMs: 0 },
    timeoutText: { timeoutMs: "5000" },
    timeoutHuge: { timeoutMs: 1e300 },
    timeoutInfinite: { timeoutMs: Infinity },
    retriesText: { maxRetries: "3" },
    retriesNegative: { maxRetries: -1 },
    keyNewline: { apiKey: "s3cr3t\nkey" },
    keyNotAscii: { apiKey: "s3cr3t\u00e9" },
    keyNotString: { apiKey: 5 },
    keyTooLong: { apiKey: "s3cr3t".repeat(200) },
    tlsText: { tls: "no" },
    caFileNumber: { caFile: 5 },
    optionsText: "fast",
    optionsNull: null,
    optionTypo: { timeout: 1000 },
  };
  for (const [name, given] of Object.entries(options)) {
    try {
      new PmlClient(target, given).close();
      out[name] = "took";
    } catch (err) {
      out[name] = err.message;
    }
  }
  const targets = {
    targetEmpty: "",
    targetNumber: 50051,
    // each failed every call UNAVAILABLE after its retry budget, as of a server down
    targetSpace: " 127.0.0.1 :50051",
    targetUrl: "http://127.0.0.1:50051",
    targetPort: "127.0.0.1:99999",
  };
  for (const [name, given] of Object.entries(targets)) {
    try {
      new PmlClient(given).close();
      out[name] = "took";
    } catch (err) {
      out[name] = err.message;
    }
  }
  // the whitespace around a key (a key file's newline) is no part of it
  new PmlClient(target, { apiKey: " s3cr3t\n" }).close();
  // nor around a target: it threw grpc-js's "Could not parse target name"
  const spaced = new PmlClient(`${target}\n`);
  out.targetNewline = Number((await spaced.stats()).executions) >= 0 ? "answered" : "no";
  spaced.close();
  const pml = new PmlClient(target);
  for (const method of ["Nope", "StreamTraces", "constructor"]) {
    try {
      await pml.call(method, {});
      out[method] = "called";
    } catch (err) {
      out[method] = err.message;
    }
  }
  const requests = {
    requestText: () => pml.call("GetStats", "x"),
    suggestNumber: () => pml.suggest(5),
    suggestTagsText: () => pml.suggest({ intent: "Load JSON", tags: "io" }),
    recordText: () => pml.record("x"),
    callOptionTimeout: () => pml.call("GetStats", {}, { timeoutMs: 5 }),
  };
  for (const [name, send] of Object.entries(requests)) {
    try {
      await send();
      out[name] = "resolved";
    } catch (err) {
      out[name] = `${err.code} ${err.message}`;
    }
  }
  try {
    await pml.call("GetStats", "x");
  } catch (err) {
    out.requestTextFields = errorDetails(err).fieldViolations.map((v) => v.field);
  }
  const uploads = {
    reconnectsText: { maxReconnects: "5" },
    onAckNotAFunction: { onAck: "log" },
    uploadOptionTypo: { maxReconnect: 5 },
  };
  for (const [name, given] of Object.entries(uploads)) {
    try {
      await pml.upload([newRecord("Read JSON file", "x", "typescript")], given);
      out[name] = "resolved";
    } catch (err) {
      out[name] = err.message;
    }
  }
  let uncaught = null;
  process.on("uncaughtException", (err) => {
    uncaught = err.message;
  });
  const records = [newRecord("Read JSON file", "x", "typescript")];
  try {
    await pml.upload(records, {
      onAck: () => {
        throw new Error("onAck failed");
      },
    });
    out.onAck = "resolved";
  } catch (err) {
    out.onAck = err.message;
  }
  // an async onAck that rejects: an unhandled rejection, which ended the process
  try {
    await pml.upload([newRecord("Read JSON file", "x", "typescript")], {
      onAck: async () => {
        throw new Error("async onAck failed");
      },
    });
    out.onAckAsync = "resolved";
  } catch (err) {
    out.onAckAsync = err.message;
  }
  await new Promise((resolve) => setTimeout(resolve, 100)); // an unhandled rejection shows by then
  out.uncaught = uncaught;
  pml.close();
  console.log(JSON.stringify(out));
}

main(process.argv[2]);
