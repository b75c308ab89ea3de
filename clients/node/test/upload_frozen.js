// Run by tests/api/test_node.py with a `pml serve` and its pid: once connected, the server is
// frozen (SIGSTOP); the upload cancels each stream the server leaves unanswered for timeoutMs
// and rejects DEADLINE_EXCEEDED once the reconnects run out (it waited for ever); an upload
// whose signal aborts meanwhile rejects with an AbortError. Prints {code, message, aborted}. Usage: node test/upload_frozen.js HOST:PORT PID
"use strict";

const { PmlClient, newRecord } = require("..");

async function main(target, pid) {
  const pml = new PmlClient(target, { timeoutMs: 1000 });
  const out = {};
  await pml.stats(); // connected
  process.kill(Number(pid), "SIGSTOP");
  try {
    await pml.upload([newRecord("Read JSON file", "x", "typescript")], { maxReconnects: 1 });
    out.code = "resolved";
  } catch (err) {
    out.code = err.code;
    out.message = err.message;
  }
  // aborted while it waits for the frozen server (before its timeout, 5 s, is up)
  const patient = new PmlClient(target, { timeoutMs: 5000 });
  const stop = new AbortController();
  setTimeout(() => stop.abort(new Error("enough")), 300);
  try {
    await patient.upload([newRecord("Read JSON file", "y", "typescript")], { signal: stop.signal });
    out.aborted = "resolved";
  } catch (err) {
    out.aborted = `${err.name} ${err.code} ${err.cause && err.cause.message}`;
  } finally {
    patient.close();
    process.kill(Number(pid), "SIGCONT");
    pml.close();
  }
  console.log(JSON.stringify(out));
}

main(process.argv[2], process.argv[3]);
