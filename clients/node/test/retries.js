// Run by tests/api/test_node.py against a server whose tenant may make one call a second
// (--tenant-rate 1 --tenant-burst 1): safe calls retry through the quota, a delete does not, and
// without retries the refusal carries the server's RetryInfo. Prints a JSON summary.
// Usage: node test/retries.js HOST:PORT API_KEY
"use strict";

const { PmlClient, newRecord, errorDetails, backoffMs } = require("..");

async function refusal(promise) {
  try {
    await promise;
    return null;
  } catch (err) {
    return err;
  }
}

async function main(target, apiKey) {
  const pml = new PmlClient(target, { apiKey });
  let stats = 0;
  for (let i = 0; i < 3; i++) if (await pml.stats()) stats++;
  const record = newRecord("Read JSON", "await mcp.read_file({path: 'a'})", "typescript", [
    { tool: "read_file", ok: true },
  ]);
  const recorded = (await pml.record(record)).pattern;
  const deleted = await refusal(pml.call("DeletePattern", { name: "patterns/none" }));
  pml.close();

  const once = new PmlClient(target, { apiKey, maxRetries: 0 });
  await new Promise((r) => setTimeout(r, 1100)); // the bucket refills
  await once.stats();
  const refused = await refusal(once.stats());
  once.close();
  const delay = errorDetails(refused).retryDelayMs;
  return {
    stats,
    recorded,
    deletedCode: deleted && deleted.code,
    refusedCode: refused && refused.code,
    retryDelayMs: delay,
    backoffAtLeastDelay: backoffMs(0, delay) >= delay,
  };
}

main(process.argv[2], process.argv[3]).then(
  (summary) => process.stdout.write(JSON.stringify(summary) + "\n"),
  (err) => {
    process.stderr.write(`retries failed: ${err.stack || err}\n`);
    process.exit(1);
  },
);
