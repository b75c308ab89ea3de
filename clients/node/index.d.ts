// Types of the pml Node package (index.js). Field names are the protos' (snake_case), enums
// their names as strings, 64-bit integers numbers (proto-loader: keepCase, enums: String,
// longs: Number).
import type { Client, Metadata, ServiceError } from "@grpc/grpc-js";

// An enum is its value's name, or its number when the package does not know it (a value a
// newer server added): kept, as the Python client keeps the int and Go the numeric value, not
// dropped, so a type of names alone let code take a number for a name (README).
export type CaptureOutcome =
  | "CAPTURE_OUTCOME_UNSPECIFIED"
  | "CAPTURE_OUTCOME_SAVED"
  | "CAPTURE_OUTCOME_COUNTED"
  | "CAPTURE_OUTCOME_REJECTED"
  | number;
export type ExecutionStatus =
  | "EXECUTION_STATUS_UNSPECIFIED"
  | "EXECUTION_STATUS_SUCCESS"
  | "EXECUTION_STATUS_FAILURE"
  | number;

export interface Timestamp {
  seconds: number;
  nanos: number;
}

export interface ToolCall {
  tool: string;
  ok: boolean;
  arguments_json?: string;
  error?: string;
  start_time?: Timestamp;
  duration_ms?: number;
}

export interface ExecutionRecord {
  request_id?: string;
  intent: string;
  code: string;
  language: string;
  tool_calls: ToolCall[];
  status?: ExecutionStatus;
  start_time?: Timestamp;
  duration_ms?: number;
  intent_embedding?: number[];
  tags?: string[];
  /** The agent session it belongs to: pml learns which step follows which. */
  session_id?: string;
}

export interface ToolFailure {
  tool: string;
  error: string;
}

export interface CaptureResult {
  outcome: CaptureOutcome;
  pattern: string;
  capability: string;
  new_pattern: boolean;
  tool_failures: ToolFailure[];
  tool_mismatch: boolean;
  replayed: boolean;
}

export interface Intent {
  id: string;
  text: string;
  hit_count: number;
  last_seen_time: Timestamp | null;
}

export interface Parameter {
  name: string;
  json_type: string;
  secret: boolean;
  recent_values_json: string[];
}

export interface Pattern {
  name: string;
  code_hash: string;
  template: string;
  original_code: string;
  language: string;
  tools_used: string[];
  parameters: Parameter[];
  parameter_schema_json: string;
  usage_count: number;
  success_count: number;
  failure_count: number;
  create_time: Timestamp | null;
  last_used_time: Timestamp | null;
  mean_duration_ms: number;
  capability: string;
  intents: Intent[];
  flagged_for_removal: boolean;
  superseded_by: string;
  tool_mismatch_count: number;
}

export interface ScoreParts {
  match: number;
  semantic: number;
  lexical: number;
  success_estimate: number;
  usage: number;
  recency: number;
  superseded_penalty: number;
  total: number;
  reliability: number;
  /** The session signal: 1 without a context (docs/ranking.md, Sessions). */
  transition: number;
}

export interface Suggestion {
  capability: string;
  pattern: Pattern;
  score: ScoreParts;
}

export interface FilteredCandidate {
  capability: string;
  pattern: string;
  rule: string;
  detail: string;
  score: ScoreParts | null;
}

export interface SuggestRequest {
  intent: string;
  page_size?: number;
  intent_embedding?: number[];
  min_match?: number;
  min_success?: number;
  include_flagged?: boolean;
  available_tools?: { tools: string[] };
  tags?: string[];
  explain?: boolean;
  /** Most plans, 0..10; unset means 3, 0 turns plans off. */
  plan_size?: number;
  /** What the agent just did; with it `intent` may be empty: what usually comes next. */
  context?: SuggestContext;
}

export interface SuggestContext {
  session_id?: string;
  previous_patterns?: string[];
  previous_tools?: string[];
}

export interface PlanPart {
  suggestion: Suggestion;
  covers: string[];
  covers_index: number[];
  /** Indexes into `suggestion.pattern.tools_used` of the steps the plan runs. */
  steps: number[];
}

export interface PlanLink {
  from_part: number;
  output: string;
  to_part: number;
  input: string;
}

export interface PlanScore {
  coverage: number;
  part_match: number[];
  part_reliability: number[];
  extra_part_cost: number;
  unlinked_inputs: number;
  unlinked_input_cost: number;
  total: number;
  best_single: number;
}

export interface Plan {
  parts: PlanPart[];
  links: PlanLink[];
  score: PlanScore;
  tools: string[];
}

export interface SuggestResponse {
  suggestions: Suggestion[];
  filtered: FilteredCandidate[];
  /** Best first; empty when one stored capability covers the request. */
  plans: Plan[];
}

export interface GetStatsResponse {
  patterns: number;
  capabilities: number;
  intents: number;
  executions: number;
  rejected: number;
  failures_logged: number;
}

export interface RpcStatus {
  code: number;
  message: string;
  details: { type_url: string; value: Uint8Array }[];
}

export interface StreamTracesResponse {
  execution_id: string;
  sequence: number;
  outcome: "result" | "error";
  result?: CaptureResult;
  error?: RpcStatus;
}

export interface UploadReport {
  acks: Map<string, StreamTracesResponse>;
  reconnects: number;
}

/** Each option object takes only its own keys: another one is refused (an ArgumentError naming it). */
export interface ClientOptions {
  /** Sent as `authorization: Bearer <key>`; default: $PML_API_KEY. Printable ASCII, at most 1024
   * characters once the whitespace around it is dropped, or the constructor throws. */
  apiKey?: string;
  /** TLS with the system roots (or caFile). */
  tls?: boolean;
  /** PEM CA of the server certificate; implies TLS. */
  caFile?: string;
  /** Client certificate and key (PEM) for mutual TLS, both or neither (the constructor throws
   * naming the one given alone); imply TLS. */
  certFile?: string;
  keyFile?: string;
  /** Deadline of each unary call, retries included (default 30000), and the longest an upload's
   * stream waits for the connection or for an answer; a number above 0, at most 2147483647
   * (24.8 days), or the constructor throws. */
  timeoutMs?: number;
  /** How long a unary call safe to repeat keeps retrying after its first failure on
   * UNAVAILABLE, or RESOURCE_EXHAUSTED with RetryInfo (a quota; a message over the size limit is
   * never sent again), within `timeoutMs` (default 5000: longer than a server restart; 0: none). */
  retryBudgetMs?: number;
  /** Caps the count of those retries (default Infinity: the budget decides; 0: none). */
  maxRetries?: number;
}

/** Options of one call. */
export interface CallOptions {
  /** Aborting it cancels the call in flight and its retries. */
  signal?: AbortSignal;
}

/** What a refused argument throws (the constructor's target and options, TLS files included; a
 * call's or an upload's options; `call`'s method), nothing sent: a TypeError with `code`
 * INVALID_ARGUMENT and a google.rpc.BadRequest naming the argument in `metadata`
 * (`errorDetails(err).fieldViolations`), as a refused request has. */
export interface ArgumentError extends TypeError {
  code: 3;
  details: string;
  metadata: Metadata;
}

/** What a call aborted by its signal rejects with (`code`: grpc status CANCELLED). */
export interface AbortError extends Error {
  name: "AbortError";
  code: 1;
  details: string;
  cause: unknown;
}

export declare class PmlClient {
  constructor(target: string, options?: ClientOptions);
  /** The generated service client (@grpc/grpc-js), for the RPCs not wrapped here. */
  readonly raw: Client;
  /**
   * Any unary RPC by its proto name, e.g. call("GetStats", {}); retried when safe to repeat.
   * `timeoutMs` bounds the whole call, retries included; `options.signal` cancels it (and its
   * retries): it rejects with an AbortError whose `code` is CANCELLED.
   */
  call<Reply = unknown>(method: string, request: object, options?: CallOptions): Promise<Reply>;
  record(record: ExecutionRecord, options?: CallOptions): Promise<CaptureResult>;
  suggest(request: SuggestRequest | string, options?: CallOptions): Promise<SuggestResponse>;
  getPattern(name: string, options?: CallOptions): Promise<Pattern>;
  stats(options?: CallOptions): Promise<GetStatsResponse>;
  /**
   * Upload over StreamTraces: after a broken stream, and for what the server acknowledged with
   * an error that waiting may cure (UNAVAILABLE, RESOURCE_EXHAUSTED with RetryInfo: not
   * captured), the records are resent (after `backoffMs`, never before RetryInfo) up to
   * `maxReconnects` (default 5) times; then such an error is the record's acknowledgement.
   * Each stream waits for the connection at most `timeoutMs` (then UNAVAILABLE, as a stream
   * broken), and is cancelled as broken once the server says nothing for `timeoutMs` while
   * records wait (out of reconnects: DEADLINE_EXCEEDED). `signal` cancels the stream and any reconnect (an AbortError, code CANCELLED).
   */
  upload(
    records: ExecutionRecord[],
    options?: {
      maxReconnects?: number;
      /** Sees each acknowledgement; a throw, or a rejection of the promise it returns, rejects
       * the upload with that error. */
      onAck?: (ack: StreamTracesResponse) => unknown;
      signal?: AbortSignal;
    },
  ): Promise<UploadReport>;
  /** Once more does nothing; later calls reject CANCELLED "pml: the client is closed". */
  close(): void;
}

export declare function newRecord(
  intent: string,
  code: string,
  language?: string,
  toolCalls?: ToolCall[],
): ExecutionRecord;

export interface ErrorDetails {
  code: string | undefined;
  message: string | undefined;
  typeUrls: string[];
  fieldViolations: { field: string; description: string }[];
  retryDelayMs: number | null;
}

export declare function errorDetails(err: ServiceError | Error): ErrorDetails;

/** The package's copy of proto/ (for loading the API yourself). */
export declare const PROTO_ROOT: string;
export declare const LOADER_OPTIONS: {
  keepCase: true;
  longs: NumberConstructor;
  enums: StringConstructor;
  defaults: true;
  oneofs: true;
};
/** Milliseconds to wait before retry `attempt` (0 first), never less than `serverDelayMs`. */
export declare function backoffMs(attempt: number, serverDelayMs?: number | null): number;
