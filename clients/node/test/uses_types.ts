// Compiled by `npm run typecheck` (tests/test_api_node.py): the package's types as a TypeScript
// user sees them through its `exports`. Misuse is marked with @ts-expect-error, so a type that
// became `any` fails the check too.
import { PmlClient, newRecord, errorDetails, type AbortError, type ArgumentError, type CaptureOutcome, type CaptureResult, type ExecutionStatus, type SuggestResponse } from "pml-client";

async function use(pml: PmlClient): Promise<number> {
  const result: CaptureResult = await pml.record(
    newRecord("Read JSON file", 'await mcp.read_file({path: "a.json"})', "typescript", [
      { tool: "read_file", ok: true },
    ]),
  );
  const outcome: "CAPTURE_OUTCOME_SAVED" | "CAPTURE_OUTCOME_COUNTED" | "CAPTURE_OUTCOME_REJECTED" | "CAPTURE_OUTCOME_UNSPECIFIED" | number =
    result.outcome;
  // An outcome a newer server added comes as its number (README): code that takes every
  // outcome for a name does not compile, and a number is one.
  // @ts-expect-error: an enum may be a number
  const named: string = result.outcome;
  const newer: CaptureOutcome = 7;
  const status: ExecutionStatus | undefined = 3;
  void named, newer, status;
  const reply: SuggestResponse = await pml.suggest({ intent: "Load JSON data", page_size: 3 });
  const report = await pml.upload([], { onAck: (ack) => ack.execution_id.length });
  // sessions (docs/ranking.md, Sessions): a record's session, a Suggest's context
  await pml.record({ ...newRecord("List", "await mcp.list_dir({})", "typescript", []), session_id: "c-1" });
  const next: SuggestResponse = await pml.suggest({ intent: "", context: { session_id: "c-1", previous_tools: ["list_dir"] } });
  const lift: number = next.suggestions[0].score.transition;
  void lift;
  try {
    await pml.suggest("");
  } catch (err) {
    const fields: string[] = errorDetails(err as Error).fieldViolations.map((v) => v.field);
    if ((err as Error).name === "AbortError") void (err as AbortError).cause;
    void fields;
  }
  // a signal cancels a call and an upload; an abort rejects with an AbortError
  const stop = new AbortController();
  await pml.stats({ signal: stop.signal });
  await pml.upload([], { signal: stop.signal });
  // @ts-expect-error: a signal is an AbortSignal
  await pml.suggest("Load JSON data", { signal: "stop" });
  // @ts-expect-error: a record needs its code
  newRecord("intent");
  // @ts-expect-error: usage counts are numbers
  const wrong: string = reply.suggestions[0].pattern.usage_count;
  void wrong;
  void outcome;
  return report.reconnects + reply.suggestions.length;
}

void use(new PmlClient("127.0.0.1:50051", { apiKey: "k" }));

// a refused argument is a TypeError with the gRPC code of a refused request
try {
  new PmlClient("127.0.0.1:50051", { timeoutMs: 0 });
} catch (err) {
  if (err instanceof TypeError) {
    const code: 3 = (err as ArgumentError).code;
    const field: string = errorDetails(err).fieldViolations[0].field;
    void code, field;
  }
}
