// Run by tests/api/test_node.py against a server whose GetStats answers UNAVAILABLE (RetryInfo
// 1 s) after 2 s, and captures a stream's records after 2 s: an AbortSignal cancels a call in
// flight, a call waiting to retry, an upload's stream in flight, a call and
// an upload whose signal is aborted already (nothing sent), each rejecting with an AbortError
// whose code is CANCELLED; a signal that is no AbortSignal is refused naming it.
// Prints {case: {name, code, detailsCode, cause}}. Usage: node test/abort.js HOST:PORT
"use strict";

const { PmlClient, newRecord, errorDetails } = require("..");

function said(err) {
  return { name: err.name, code: err.code, detailsCode: errorDetails(err).code, cause: err.cause && err.cause.message };
}

async function outcome(promise) {
  try {
    await promise;
    return "resolved";
  } catch (err) {
    return said(err);
  }
}

async function main(target) {
  const pml = new PmlClient(target, { timeoutMs: 20000, maxRetries: 3 });
  const out = {};
  await pml.call("GetServerInfo", {}); // connected: the next call reaches the server at once
  const inFlight = new AbortController();
  setTimeout(() => inFlight.abort(new Error("in flight")), 500);
  out.inFlight = await outcome(pml.stats({ signal: inFlight.signal }));
  const waiting = new AbortController();
  setTimeout(() => waiting.abort(new Error("waiting")), 2500); // the answer came at 2 s
  out.waiting = await outcome(pml.stats({ signal: waiting.signal }));
  const streaming = new AbortController();
  setTimeout(() => streaming.abort(new Error("streaming")), 500); // the server acks at 2 s
  out.streaming = await outcome(pml.upload([newRecord("Read JSON file", "x", "typescript")], { signal: streaming.signal }));
  const before = AbortSignal.abort(new Error("before"));
  out.before = await outcome(pml.stats({ signal: before }));
  out.uploadBefore = await outcome(pml.upload([newRecord("Read JSON file", "x", "typescript")], { signal: before }));
  for (const [name, options] of Object.entries({ notASignal: { signal: "stop" }, notOptions: 5 })) {
    try {
      await pml.stats(options);
      out[name] = "resolved";
    } catch (err) {
      out[name] = `${err.name}: ${err.message}`;
    }
  }
  pml.close();
  console.log(JSON.stringify(out));
}

main(process.argv[2]);
