// Run by tests/api/test_node.py with the address of a server it stops and starts again on the
// same port 1.5 s later (a rolling upgrade): the record sent meanwhile retries through the
// restart (retryBudgetMs: 5 s by default, 30 s here, the restart being slower on a loaded
// machine), then is sent again (replayed, counted once). Prints
// {pattern, replayed, executions} or {code, message}.
// Usage: node test/restart.js HOST:PORT
"use strict";

const { PmlClient, newRecord } = require("..");

async function main(target) {
  const pml = new PmlClient(target, { timeoutMs: 60000, retryBudgetMs: 30000 });
  const record = newRecord("Read JSON", "await mcp.read_file({path: 'a'})", "typescript", [
    { tool: "read_file", ok: true },
  ]);
  try {
    const first = await pml.record(record);
    const again = await pml.record(record);
    const stats = await pml.stats();
    return { pattern: first.pattern, replayed: again.replayed, executions: Number(stats.executions) };
  } catch (err) {
    return { code: err.code, message: err.message };
  } finally {
    pml.close();
  }
}

main(process.argv[2]).then((out) => console.log(JSON.stringify(out)));
