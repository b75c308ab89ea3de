// Run by tests/api/test_node.py against a server whose GetStats answers UNAVAILABLE (RetryInfo
// 1 s) after 1.2 s: with timeoutMs 2800 the retry gets what remains of it, and the call rejects
// DEADLINE_EXCEEDED (each retry had a fresh 2800 ms: four attempts, UNAVAILABLE).
// Prints {code}. Usage: node test/deadline.js HOST:PORT
"use strict";

const { PmlClient } = require("..");

async function main(target) {
  const pml = new PmlClient(target, { timeoutMs: 2800, maxRetries: 3 });
  const out = {};
  try {
    await pml.stats();
    out.code = "resolved";
  } catch (err) {
    out.code = err.code;
  } finally {
    pml.close();
  }
  console.log(JSON.stringify(out));
}

main(process.argv[2]);
