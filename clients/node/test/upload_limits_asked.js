// Run by tests/api/test_node.py with the address of a port nothing listens on: an upload asks
// the server its limits (GetServerInfo) once, never retrying that ask for a retry budget (its
// streams' reconnects are its retries). Prints {code, asked}.
// Usage: node test/upload_limits_asked.js HOST:PORT
"use strict";

const { PmlClient, newRecord } = require("..");

async function main(target) {
  const pml = new PmlClient(target, { timeoutMs: 3000, retryBudgetMs: 2000 });
  const out = { asked: 0 };
  const ask = pml.raw.GetServerInfo.bind(pml.raw);
  pml.raw.GetServerInfo = (...args) => {
    out.asked += 1;
    return ask(...args);
  };
  try {
    await pml.upload([newRecord("Read JSON file", "x", "typescript")], { maxReconnects: 2 });
    out.code = "resolved";
  } catch (err) {
    out.code = err.code;
  } finally {
    pml.close();
  }
  console.log(JSON.stringify(out));
}

main(process.argv[2]);
