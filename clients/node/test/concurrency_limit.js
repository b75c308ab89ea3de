// Run by tests/api/test_node.py against a server with --max-concurrent-rpcs 2: two streams
// hold both slots, so a record's first attempt is refused by grpcio ("Concurrent RPC limit
// exceeded!", no RetryInfo); the streams end before its second. Prints {outcome, attempts,
// executions}.
// Usage: node test/concurrency_limit.js TARGET
"use strict";

const { PmlClient, newRecord } = require("..");

function holdSlot(pml, name) {
  const call = pml.raw.StreamTraces();
  const ended = new Promise((resolve) => {
    call.on("end", resolve);
    call.on("error", resolve);
  });
  const acknowledged = new Promise((resolve) => call.once("data", resolve));
  call.write({ execution_id: name, sequence: 1, record: newRecord(`hold ${name}`, `await mcp.hold_${name}()`) });
  return acknowledged.then(() => ({ release: () => (call.end(), ended) }));
}

async function main() {
  const pml = new PmlClient(process.argv[2]);
  const holders = await Promise.all([holdSlot(pml, "s0"), holdSlot(pml, "s1")]);
  let attempts = 0;
  const recordExecution = pml.raw.RecordExecution.bind(pml.raw);
  pml.raw.RecordExecution = (...args) => {
    attempts += 1;
    if (attempts !== 2) return recordExecution(...args);
    // the second attempt waits for the slots: given back, it is answered
    const call = { cancel: () => {} };
    Promise.all(holders.map((h) => h.release())).then(() => {
      const inner = recordExecution(...args);
      call.cancel = () => inner.cancel();
    });
    return call;
  };
  const result = await pml.record(newRecord("Read JSON", "await mcp.read_file({path: 'a'})"));
  const executions = (await pml.stats()).executions;
  pml.close();
  console.log(JSON.stringify({ outcome: result.outcome, attempts, executions }));
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
