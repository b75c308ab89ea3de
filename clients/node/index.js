// pml's Node client: the pml.v1 gRPC API loaded at run time from the package's own copy of the
// protos (./proto, made by `make proto` and checked for drift), with @grpc/proto-loader.
// Field names are the protos' own (snake_case); enums are their names as strings; 64-bit
// integers are numbers.
"use strict";

const path = require("node:path");
const fs = require("node:fs");
const crypto = require("node:crypto");
const nodeTls = require("node:tls");
const grpc = require("@grpc/grpc-js");
const protoLoader = require("@grpc/proto-loader");
const protobuf = require("protobufjs");

const PROTO_ROOT = path.join(__dirname, "proto");
const LOADER_OPTIONS = { keepCase: true, longs: Number, enums: String, defaults: true, oneofs: true };

let loaded = null;
function api() {
  if (loaded === null) {
    const definition = protoLoader.loadSync("pml/v1/pml.proto", {
      ...LOADER_OPTIONS,
      includeDirs: [PROTO_ROOT],
    });
    // Error details travel as a serialized google.rpc.Status in `grpc-status-details-bin`.
    const root = new protobuf.Root();
    root.resolvePath = (_origin, target) =>
      target.startsWith("google/protobuf/") ? target : path.join(PROTO_ROOT, target);
    root.loadSync(["google/rpc/status.proto", "google/protobuf/duration.proto"]);
    root.define("google.rpc").add(
      new protobuf.Type("BadRequest")
        .add(new protobuf.Field("field_violations", 1, "FieldViolation", "repeated"))
        .add(
          new protobuf.Type("FieldViolation")
            .add(new protobuf.Field("field", 1, "string"))
            .add(new protobuf.Field("description", 2, "string")),
        ),
    );
    root.define("google.rpc").add(
      new protobuf.Type("RetryInfo").add(
        new protobuf.Field("retry_delay", 1, "google.protobuf.Duration"),
      ),
    );
    // The request messages as protobufjs types, field names as the protos spell them, for
    // `violation` (grpc-js's serializer is protobufjs's fromObject, which coerces).
    const requests = new protobuf.Root();
    requests.resolvePath = root.resolvePath;
    requests.loadSync(["pml/v1/pml.proto"], { keepCase: true });
    loaded = {
      service: grpc.loadPackageDefinition(definition).pml.v1.PmlService,
      requests,
      Status: root.lookupType("google.rpc.Status"),
      BadRequest: root.lookupType("google.rpc.BadRequest"),
      RetryInfo: root.lookupType("google.rpc.RetryInfo"),
    };
  }
  return loaded;
}

// A broken stream is opened again when cut, or refused for a while only (`worthResending`).
const CUT = new Set([grpc.status.CANCELLED, grpc.status.DEADLINE_EXCEEDED]);

// How long a unary call safe to repeat keeps retrying after its first failure (UNAVAILABLE, a
// quota), within its timeout: longer than a server restart, short enough that a server that is
// gone fails the call in seconds (docs/api.md, Deadlines and retries). No cap on the count by
// default: the budget and the timeout bound the retries.
const DEFAULT_RETRY_BUDGET_MS = 5000;
const DEFAULT_RETRIES = Infinity;
// grpc-js backs off a channel's reconnects from 1 s by 1.6 up to 120 s, and while it waits every
// call fails at once with the last connect error: a call retrying through a server restart kept
// failing after the server was back. The channel reconnects from 0.1 s, at least once a second.
const RECONNECT_OPTIONS = { "grpc.initial_reconnect_backoff_ms": 100, "grpc.max_reconnect_backoff_ms": 1000 };
const READS = new Set([
  "GetServerInfo", "Suggest", "GetPattern", "ListPatterns", "ListPatternIntents", "GetCapability",
  "ListCapabilities", "ListFailures", "GetStats",
]);

/** Whether a unary call may be sent again: a delete or an applied retention may not. */
function safeToRepeat(method, request) {
  if (READS.has(method)) return true;
  if (method === "RecordExecution") return Boolean(request && request.record && request.record.request_id);
  if (method === "RunRetention") return !(request && request.apply);
  return false;
}

/** Wait before retry `attempt` (0 first): 0.1 s doubling to 2 s, jitter on the upper half,
 * never less than the server's RetryInfo delay. */
function backoffMs(attempt, serverDelayMs) {
  const ceiling = Math.min(2000, 100 * 2 ** attempt);
  return Math.max(ceiling / 2 + Math.random() * (ceiling / 2), serverDelayMs || 0);
}

/** The wait before retry `attempt` at `now` (ms since the epoch), null when no retry is to be
 * made: `backoffMs` cut to end at `retryUntil` (the budget's end: the last retry is made then),
 * never less than the server's RetryInfo; null once the budget is spent, or when the wait would
 * end past it or at the call's `deadline` (docs/api.md, Deadlines and retries). */
function retryWaitMs(attempt, serverDelayMs, now, retryUntil, deadline) {
  if (now >= retryUntil) return null;
  const wait = Math.max(Math.min(backoffMs(attempt), retryUntil - now), serverDelayMs || 0);
  if (now + wait > retryUntil || now + wait >= deadline) return null;
  return wait;
}

/** The google.rpc.Status details of a refused call: BadRequest field violations, RetryInfo. */
function errorDetails(err) {
  const raw = err && err.metadata ? err.metadata.get("grpc-status-details-bin")[0] : undefined;
  const out = { code: err && grpc.status[err.code], message: err && err.details, typeUrls: [], fieldViolations: [], retryDelayMs: null };
  return raw ? readDetails(api().Status.decode(raw).details, out) : out;
}

/** `errorDetails` of a google.rpc.Status (a stream's acknowledgement of one execution). */
function statusDetails(status) {
  const out = { code: grpc.status[status.code], message: status.message, typeUrls: [], fieldViolations: [], retryDelayMs: null };
  return readDetails(status.details || [], out);
}

function readDetails(details, out) {
  const { BadRequest, RetryInfo } = api();
  for (const any of details) {
    out.typeUrls.push(any.type_url);
    if (any.type_url.endsWith("/google.rpc.BadRequest")) {
      for (const v of BadRequest.decode(any.value).field_violations) {
        out.fieldViolations.push({ field: v.field, description: v.description });
      }
    } else if (any.type_url.endsWith("/google.rpc.RetryInfo")) {
      const d = RetryInfo.decode(any.value).retry_delay || {};
      out.retryDelayMs = Number(d.seconds || 0) * 1000 + (d.nanos || 0) / 1e6;
    }
  }
  return out;
}

// grpcio's refusal of a call over the server's --max-concurrent-rpcs, made before any handler
// runs, so without RetryInfo: a busy server, not a size limit (docs/api.md, Deadlines and
// retries). Nothing of the call was done.
const CONCURRENCY_REFUSAL = "Concurrent RPC limit exceeded!";

/** Whether a unary call refused, or an execution acknowledged, with this error was refused
 * for a while only: UNAVAILABLE, or RESOURCE_EXHAUSTED with the server's RetryInfo (a quota)
 * or grpcio's CONCURRENCY_REFUSAL (without either, a size limit that the same message meets
 * again). */
function worthResending(details) {
  if (details.code === "UNAVAILABLE") return true;
  return details.code === "RESOURCE_EXHAUSTED" &&
    (details.retryDelayMs !== null || details.message === CONCURRENCY_REFUSAL);
}

// grpc-js's words (Node's TLS) for a server certificate the client did not verify: a CA that
// did not sign it, a name it does not hold, one expired or not yet valid.
const CERTIFICATE_FAILURE =
  /unable to verify|unable to get (local )?issuer|self[- ]signed certificate|certificate (has expired|is not yet valid|signature failure)|ERR_TLS_CERT_ALTNAME_INVALID|Hostname\/IP does not match/;

/** `target`'s host and port ("host:port", "[v6]:port", "dns:host:port"), or null. */
function hostPort(target) {
  const rest = String(target).replace(/^dns:(\/\/\/)?/, "");
  const match = /^\[?([^\]/]+?)\]?:(\d+)$/.exec(rest);
  return match ? { host: match[1], port: Number(match[2]) } : null;
}

// The longest a handshake of `asksForClientCertificate` may take.
const ASK_HANDSHAKE_MS = 5000;

/**
 * Whether the TLS server at `target` refuses a client for want of a certificate: a handshake of
 * this client's own (the server's certificate not checked: nothing is sent over it) in which the
 * server asks for one (OpenSSL shares signature algorithms with a client only when the server
 * sent a CertificateRequest: `getSharedSigalgs`), then closes the connection without a byte. A
 * server that takes the client answers HTTP/2's SETTINGS. False whatever else happens.
 */
function asksForClientCertificate(target, ms) {
  return handshake(target, ms).then(({ asked, answered }) => asked && !answered);
}

/** A TLS handshake of this client's own with `target`, within `ms` (at most ASK_HANDSHAKE_MS),
 * the server's certificate not checked: whether it was made (`secure`), the server asked for a
 * client certificate (`asked`), answered HTTP/2's SETTINGS after it (`answered`). */
function handshake(target, ms) {
  const address = hostPort(target);
  const none = { secure: false, asked: false, answered: false };
  if (!address || !(ms > 0)) return Promise.resolve(none);
  return new Promise((resolve) => {
    const said = { ...none };
    const socket = nodeTls.connect({ ...address, rejectUnauthorized: false, ALPNProtocols: ["h2"] }, () => {
      said.secure = true;
      said.asked = socket.getSharedSigalgs().length > 0;
    });
    const timer = setTimeout(() => socket.destroy(), Math.min(ms, ASK_HANDSHAKE_MS));
    socket.on("data", () => {
      said.answered = true;
      socket.destroy();
    });
    socket.on("error", () => {});
    socket.on("close", () => {
      clearTimeout(timer);
      resolve(said);
    });
  });
}

// grpc-js's words (Node's TLS) for a server that answered a TLS client in plaintext, and for
// a connection made and then closed before HTTP/2's SETTINGS ("Failed to connect (<time>)"; a
// port nothing listens on says ECONNREFUSED).
const NOT_TLS = /wrong version number|packet length too long|unknown protocol/;
const CLOSED_AT_ONCE = /Last error: Failed to connect \(/;

/**
 * `err` said again when TLS is on one side only, null otherwise: a TLS client of a plaintext
 * server (OpenSSL's "wrong version number"), or a plaintext client (`plaintext`) of a server
 * that completes a TLS handshake of the client's own (`handshake`, within `ms`), which closed
 * its connection at once. grpc-js says UNAVAILABLE, as of a server down: each call was retried
 * for its budget, and an upload waited timeoutMs on each reconnect, then said only "no
 * connection ... within". No wait cures it: never retried, naming the options (docs/api.md,
 * Deadlines and retries).
 */
async function tlsOnOneSide(err, target, plaintext, ms) {
  if (!err || err.code !== grpc.status.UNAVAILABLE) return null;
  let message;
  if (!plaintext && NOT_TLS.test(err.details || "")) {
    message =
      `pml: TLS: the server does not speak TLS (${err.details}): it listens in plaintext; leave tls, ` +
      "caFile, certFile and keyFile unset (or start it with --tls-cert and --tls-key); not retried";
  } else if (plaintext && CLOSED_AT_ONCE.test(err.details || "") && (await handshake(target, ms)).secure) {
    message =
      `pml: TLS: the server speaks TLS and this client connected in plaintext (${err.details}): ` +
      "pass tls: true, or caFile (the PEM of the CA that signed its certificate); not retried";
  } else {
    return null;
  }
  return Object.assign(new Error(message, { cause: err }), {
    code: grpc.status.UNAVAILABLE, details: message, metadata: err.metadata, tlsOnOneSide: true,
  });
}

// grpc-js's words for a connection that could not be made: a server asking for a client
// certificate closes it once the handshake is done.
const NOT_CONNECTED = /No connection established|Connection dropped|Failed to connect/;

/**
 * `err` said again when a server that asks for a client certificate (mutual TLS) refused this
 * client, which has none (`tlsWithoutCertificate`), null otherwise. grpc-js says UNAVAILABLE "No
 * connection established", as of a server gone: each call was retried for its budget. The
 * client asks the server in a handshake of its own (`asksForClientCertificate`, within `ms`); no
 * wait cures it: it is never retried, and names certFile and keyFile (docs/api.md, Deadlines
 * and retries).
 */
async function clientCertificateRefusal(err, target, tlsWithoutCertificate, ms) {
  if (!tlsWithoutCertificate || !err || err.code !== grpc.status.UNAVAILABLE || !NOT_CONNECTED.test(err.details || "")) {
    return null;
  }
  if (!(await asksForClientCertificate(target, ms))) return null;
  const message =
    "pml: TLS: the server refused the handshake: it asks for a client certificate (mutual TLS) " +
    `and none was given (${err.details}): pass certFile and keyFile, a certificate its client ` +
    "CA signed; not retried";
  return Object.assign(new Error(message, { cause: err }), {
    code: grpc.status.UNAVAILABLE, details: message, metadata: err.metadata, clientCertificateRequired: true,
  });
}

/**
 * `err` said again when it is a failure to verify the server's TLS certificate, null otherwise.
 * grpc-js says UNAVAILABLE, as of a server down: each call was tried maxRetries more times and
 * an upload waited for the connection timeoutMs on each of its reconnects, never saying why.
 * No wait cures it: it is never retried, and names caFile (docs/api.md, Deadlines and retries).
 */
function certificateFailure(err) {
  if (!err || err.code !== grpc.status.UNAVAILABLE || !CERTIFICATE_FAILURE.test(err.details || "")) {
    return null;
  }
  const message =
    `pml: TLS: the server's certificate was not verified (${err.details}): caFile must be the PEM of ` +
    "the CA that signed it (without it, the system's roots are used), and the certificate must " +
    "hold the target's host; not retried";
  return Object.assign(new Error(message, { cause: err }), { code: grpc.status.UNAVAILABLE, details: message, metadata: err.metadata });
}

/**
 * The `signal` of a call's options: undefined, or an AbortSignal (anything else is refused
 * naming it, before any call: a signal that is not one would be ignored, the call never
 * cancelled). `what` names the method.
 */
// An option of `call` for this module's own calls: the call is made once, never retried.
const ONCE = Symbol("pml.once");
// An option of `call` for this module's own calls: the deadline (ms since the epoch) of the call
// it is part of (record's ask of the server's limit spends from the record's timeout).
const DEADLINE = Symbol("pml.deadline");

// The options each takes (index.d.ts: ClientOptions, CallOptions, upload's).
const CLIENT_OPTIONS = ["apiKey", "tls", "caFile", "certFile", "keyFile", "timeoutMs", "retryBudgetMs", "maxRetries"];
const CALL_OPTIONS = ["signal"];
const UPLOAD_OPTIONS = ["maxReconnects", "onAck", "signal"];

/** Throws naming the first key of `options` that is none of `allowed`: it was ignored without a
 * word (`timeout: 1000` for timeoutMs, `api_key` for apiKey, a per-call `timeoutMs`). */
function checkKnown(what, options, allowed) {
  const unknown = Object.keys(options).find((key) => !allowed.includes(key));
  if (unknown !== undefined) {
    throw argumentError(`pml: ${what} ${JSON.stringify(unknown)} is none of ${allowed.join(", ")}`, unknown);
  }
}

function signalOf(what, options, allowed = CALL_OPTIONS) {
  if (options === undefined || options === null) return undefined;
  if (typeof options !== "object") {
    throw argumentError(`pml: ${what}: options is ${typeof options}, not an object ({ signal })`, "options");
  }
  checkKnown(`${what}: option`, options, allowed);
  const { signal } = options;
  if (signal === undefined) return undefined;
  if (signal === null || typeof signal !== "object" || typeof signal.aborted !== "boolean" ||
      typeof signal.addEventListener !== "function") {
    throw argumentError(`pml: ${what}: signal is ${signal === null ? "null" : typeof signal}, not an AbortSignal`, "signal");
  }
  return signal;
}

/**
 * What a call aborted by its `signal` rejects with: the standard AbortError shape (name
 * "AbortError", the signal's reason as `cause`) in the client's error tree, where `code` is
 * the gRPC status: CANCELLED, as grpc-js says of a call cancelled (clients/node/README.md).
 */
function abortError(signal) {
  const message = "pml: the call was aborted by its signal";
  const err = new Error(message, { cause: signal.reason });
  return Object.assign(err, { name: "AbortError", code: grpc.status.CANCELLED, details: message });
}

/** `promise`, or an abortError as soon as `signal` aborts (what `promise` does then is
 * dropped). */
function abortable(promise, signal) {
  if (!signal) return promise;
  if (signal.aborted) return Promise.reject(abortError(signal));
  return new Promise((resolve, reject) => {
    const onAbort = () => reject(abortError(signal));
    signal.addEventListener("abort", onAbort, { once: true });
    promise.then(resolve, reject).finally(() => signal.removeEventListener("abort", onAbort));
  });
}

function sleep(ms, signal) {
  let timer;
  const slept = new Promise((resolve) => {
    timer = setTimeout(resolve, ms);
  });
  return abortable(slept, signal).finally(() => clearTimeout(timer));
}

/** An ExecutionRecord with a fresh request id; calls are {tool, ok, error?, arguments_json?}. */
function newRecord(intent, code, language = "typescript", toolCalls = []) {
  return { request_id: crypto.randomUUID(), intent, code, language, tool_calls: toolCalls };
}

/**
 * The channel's credentials, refusing at construction, naming the option, what would fail
 * later or quietly (clients/node/README.md): a keyFile without its certFile connected in
 * plaintext; a certFile without its keyFile, a caFile that cannot be read or holds no PEM
 * certificate said neither which option nor which file.
 */
function channelCredentials(tls, caFile, certFile, keyFile) {
  if (Boolean(certFile) !== Boolean(keyFile)) {
    const [given, missing] = certFile ? ["certFile", "keyFile"] : ["keyFile", "certFile"];
    throw argumentError(`pml: ${given} given without ${missing}: mutual TLS needs the client certificate and its key`, given);
  }
  if (!tls && !caFile && !certFile) return grpc.credentials.createInsecure();
  const ca = caFile ? tlsFile("caFile", caFile) : null;
  if (ca && !ca.includes("-----BEGIN CERTIFICATE-----")) {
    throw argumentError(`pml: caFile ${caFile} holds no PEM certificate`, "caFile");
  }
  const key = keyFile ? tlsFile("keyFile", keyFile) : null;
  const cert = certFile ? tlsFile("certFile", certFile) : null;
  try {
    return grpc.credentials.createSsl(ca, key, cert);
  } catch (err) {
    throw argumentError(`pml: certFile ${certFile}, keyFile ${keyFile}: ${err.message}`, "certFile", "keyFile");
  }
}

/** A TLS option's file; an error names the option and the file. */
function tlsFile(option, file) {
  try {
    return fs.readFileSync(file);
  } catch (err) {
    // "ENOENT: no such file or directory, open '/x'": the file is named once, before
    throw argumentError(`pml: ${option} ${file} cannot be read: ${err.message.split(", ")[0]}`, option);
  }
}

/** A refused option's value as given: JSON, but a number as itself (Infinity, NaN). */
function shown(value) {
  return typeof value === "number" ? String(value) : JSON.stringify(value) ?? String(value);
}

// A record() this big asks the server's message limit first (as the Python client's record).
const ASK_LIMIT_BYTES = 64 * 1024;

const MAX_KEY_CHARS = 1024;
// The longest timeout, as Node's timers take it (docs/api.md, Deadlines and retries).
const MAX_TIMEOUT_MS = 2 ** 31 - 1;

/**
 * `apiKey` as it can travel in the `authorization` header: a string, without the whitespace
 * around it (a key read from a file keeps its newline), printable ASCII, at most
 * MAX_KEY_CHARS (`pml keys add` prints 47; past gRPC's 8 KiB of metadata every call fails on
 * the header). A control or non-ASCII character failed every call with grpc-js's `Metadata
 * string value "Bearer <the key>" contains illegal characters`, the secret in the message; a
 * key that is no string was sent as "Bearer [object Object]". Each is refused by the
 * constructor naming `apiKey`, never echoing the key (clients/node/README.md).
 */
function headerKey(apiKey) {
  if (typeof apiKey !== "string") {
    throw argumentError(`pml: apiKey is ${apiKey === null ? "null" : typeof apiKey}, not a string`, "apiKey");
  }
  const key = apiKey.trim();
  const chars = [...key];
  const bad = chars.findIndex((ch) => !(ch >= " " && ch <= "~"));
  if (bad >= 0) {
    const code = chars[bad].codePointAt(0);
    throw argumentError(
      `pml: apiKey holds U+${code.toString(16).toUpperCase().padStart(4, "0")} at position ${bad}: ` +
        "a key is printable ASCII (as `pml keys add` prints it)",
      "apiKey",
    );
  }
  if (key.length > MAX_KEY_CHARS) {
    throw argumentError(`pml: apiKey is ${key.length} characters; a key is at most ${MAX_KEY_CHARS} (\`pml keys add\` prints 47)`, "apiKey");
  }
  return key;
}

/**
 * Why `target` cannot be dialled, null when it may be: a space or a control character inside it,
 * a URL's scheme, a port out of range. Each failed every call UNAVAILABLE once its retry budget
 * was spent ("Name resolution failed", ERR_SOCKET_BAD_PORT), as of a server down; a newline
 * threw grpc-js's "Could not parse target name" (clients/node/README.md).
 */
function targetProblem(target) {
  if (/[\s\p{Cc}]/u.test(target)) return "holds a space or a control character";
  if (/^https?:\/\//i.test(target)) return "is a URL (TLS is the tls option)";
  const address = hostPort(target);
  if (address && !(address.port >= 1 && address.port <= 65535)) return `has the port ${address.port}: a port is 1 to 65535`;
  return null;
}

/** Each option that is given must be of its type: refused naming it (`caFile: 5` read file
 * descriptor 5; `tls: "no"` turned TLS on; options that were no object were ignored). */
function checkOptions(target, options) {
  if (typeof target !== "string" || target.trim() === "") {
    throw argumentError(`pml: target ${JSON.stringify(target) ?? String(target)}: give "host:port"`, "target");
  }
  const problem = targetProblem(target.trim());
  if (problem) throw argumentError(`pml: target ${JSON.stringify(target.trim())} ${problem}: give "host:port"`, "target");
  if (options === null || typeof options !== "object" || Array.isArray(options)) {
    throw argumentError(`pml: options is ${options === null ? "null" : Array.isArray(options) ? "an array" : typeof options}, not an object`, "options");
  }
  checkKnown("option", options, CLIENT_OPTIONS);
  for (const name of ["caFile", "certFile", "keyFile"]) {
    if (options[name] !== undefined && (typeof options[name] !== "string" || options[name] === "")) {
      throw argumentError(`pml: ${name} ${JSON.stringify(options[name])}: a file path`, name);
    }
  }
  if (options.tls !== undefined && typeof options.tls !== "boolean") {
    throw argumentError(`pml: tls ${JSON.stringify(options.tls)}: true or false`, "tls");
  }
}

class PmlClient {
  /**
   * @param {string} target host:port
   * @param {object} [options] apiKey, tls, caFile, certFile, keyFile, timeoutMs (default 30000)
   */
  constructor(target, options = {}) {
    checkOptions(target, options);
    target = target.trim(); // a target read from a file keeps its newline
    const {
      apiKey = process.env.PML_API_KEY, tls = false, caFile, certFile, keyFile, timeoutMs = 30000,
      maxRetries = DEFAULT_RETRIES, retryBudgetMs = DEFAULT_RETRY_BUDGET_MS,
    } = options;
    // A timeout that is no positive number failed every call (DEADLINE_EXCEEDED at once, or
    // grpc-js's "deadline must be a number or Date"); a maxRetries that is no integer was
    // taken as none (clients/node/README.md).
    // Over MAX_TIMEOUT_MS, Node's timers fire at once (the upload's silence cancelled every
    // stream) and grpc-js threw "Deadline is too far in the future" uncaught, ending the process.
    if (typeof timeoutMs !== "number" || !(timeoutMs > 0) || !(timeoutMs <= MAX_TIMEOUT_MS)) {
      throw argumentError(
        `pml: timeoutMs ${shown(timeoutMs)}: a number of milliseconds above 0, at most ${MAX_TIMEOUT_MS} (24.8 days)`,
        "timeoutMs",
      );
    }
    if (!(Number.isInteger(maxRetries) || maxRetries === Infinity) || maxRetries < 0) {
      throw argumentError(`pml: maxRetries ${shown(maxRetries)}: an integer from 0 (0: none), or Infinity`, "maxRetries");
    }
    if (typeof retryBudgetMs !== "number" || !(retryBudgetMs >= 0) || !(retryBudgetMs <= MAX_TIMEOUT_MS)) {
      throw argumentError(
        `pml: retryBudgetMs ${shown(retryBudgetMs)}: a number of milliseconds from 0 (0: no retries), at most ${MAX_TIMEOUT_MS}`,
        "retryBudgetMs",
      );
    }
    this._maxRetries = maxRetries;
    this._retryBudgetMs = retryBudgetMs;
    // checked before the channel exists: a bad key leaves nothing to close; an empty one (an
    // empty PML_API_KEY) is no key
    this._apiKey = apiKey === undefined || apiKey === "" ? undefined : headerKey(apiKey);
    const creds = channelCredentials(tls, caFile, certFile, keyFile);
    // TLS without a client certificate: a refused handshake is asked about
    this._tlsWithoutCertificate = Boolean((tls || caFile) && !certFile);
    this._plaintext = !tls && !caFile && !certFile;
    this.raw = new (api().service)(target, creds, {
      "grpc.max_receive_message_length": 64 << 20,
      ...RECONNECT_OPTIONS,
    });
    this._target = target;
    this._timeoutMs = timeoutMs;
  }

  _metadata(options) {
    const md = new grpc.Metadata(options);
    if (this._apiKey) md.set("authorization", `Bearer ${this._apiKey}`);
    return md;
  }

  /**
   * Any unary RPC by its proto name, e.g. call("GetStats", {}). A call safe to repeat (a read, a
   * record with a request id, a retention dry run) is retried for `retryBudgetMs` after its first
   * failure (at most `maxRetries` times) on UNAVAILABLE, or RESOURCE_EXHAUSTED with the server's
   * RetryInfo (a quota; without it, a message over the server's size limit, never sent again),
   * never sooner than that delay.
   * `timeoutMs` bounds the whole call, retries included (docs/api.md, Deadlines and retries):
   * each attempt's deadline is what remains, and a retry whose wait would outlast it is not
   * made (the last error rejects). `options.signal` (an AbortSignal) cancels the call in flight
   * and any retry: it rejects with `abortError`.
   */
  async call(method, request, options) {
    const signal = signalOf(`call ${method}`, options);
    const once = Boolean(options && options[ONCE]); // `_maxMessageBytes`: never retried
    this._open();
    const rpcs = api().service.service;
    const rpc = Object.hasOwn(rpcs, method) ? rpcs[method] : undefined;
    if (!rpc || rpc.requestStream || rpc.responseStream) {
      // it threw "this.raw[method] is not a function", or called a stream as if unary
      const which = rpc ? `${method} is a stream (upload(), or pml.raw.${method})` : `no RPC ${JSON.stringify(method)}`;
      throw argumentError(`pml: call: ${which}: a unary RPC of pml.v1.PmlService`, "method");
    }
    // A request that does not serialize failed INTERNAL "Request message serialization
    // failure", and only once a connection was up (UNAVAILABLE while none was); a string or a
    // number as the request was sent as an empty one. Refused here, nothing sent, naming the
    // field as protobufjs does (`.pml.v1.SuggestRequest.tags: array expected`).
    if (request === undefined || request === null) request = {};
    if (typeof request !== "object" || Array.isArray(request)) {
      const kind = Array.isArray(request) ? "an array" : typeof request;
      const description = `is ${kind}, not a ${rpc.path.split("/")[2]}Request object`;
      throw invalidArgument(`${method}: the request ${description} (nothing was sent)`, "request", description);
    }
    const found = violation(api().requests.lookupType(`pml.v1.${rpc.requestType.type.name}`), request);
    if (found) throw refusedRequest(`${method}: `, found);
    try {
      rpc.requestSerialize(request);
    } catch (err) {
      const description = `does not serialize: ${err.message}`;
      throw invalidArgument(`${method}: the request ${description} (nothing was sent)`, "request", description);
    }
    const deadline = (options && options[DEADLINE]) || Date.now() + this._timeoutMs;
    let retryUntil = null; // the budget's end, from the first failure
    for (let attempt = 0; ; attempt++) {
      try {
        return await this._callOnce(method, request, deadline, signal);
      } catch (err) {
        if (err.name === "AbortError") throw err;
        const refused =
          certificateFailure(err) ||
          (await clientCertificateRefusal(err, this._target, this._tlsWithoutCertificate, deadline - Date.now())) ||
          (await tlsOnOneSide(err, this._target, this._plaintext, deadline - Date.now()));
        if (refused) throw refused; // no retry cures it
        const details = errorDetails(err);
        if (once || attempt >= this._maxRetries || !worthResending(details) || !safeToRepeat(method, request)) {
          throw err;
        }
        const now = Date.now();
        if (retryUntil === null) retryUntil = now + this._retryBudgetMs;
        const wait = retryWaitMs(attempt, details.retryDelayMs, now, retryUntil, deadline);
        if (wait === null) throw err;
        await sleep(wait, signal);
      }
    }
  }

  _callOnce(method, request, deadline, signal) {
    if (signal && signal.aborted) return Promise.reject(abortError(signal));
    return new Promise((resolve, reject) => {
      const onAbort = () => call.cancel(); // grpc-js then answers CANCELLED
      const call = this.raw[method](request, this._metadata(), { deadline }, (err, reply) => {
        if (signal) signal.removeEventListener("abort", onAbort);
        if (err) reject(signal && signal.aborted ? abortError(signal) : err);
        else resolve(reply);
      });
      if (signal) signal.addEventListener("abort", onAbort, { once: true });
    });
  }

  /**
   * RecordExecution; resolves to the CaptureResult (a rejection is an outcome, not an error).
   * A record over the server's message limit is not sent: it rejects RESOURCE_EXHAUSTED with a
   * BadRequest naming `record`, its size and the limit, as `upload` answers for it and as the
   * Python client's `record` (the call said only grpc's "Received message larger than max",
   * the record sent whole). The server's limit is asked only for a record over ASK_LIMIT_BYTES.
   */
  async record(record, options) {
    const request = { record };
    const rpc = api().service.service.RecordExecution;
    const checked = record !== null && typeof record === "object" &&
      !violation(api().requests.lookupType("pml.v1.RecordExecutionRequest"), request);
    const size = checked ? rpc.requestSerialize(request).length : 0; // else call() refuses it
    if (size <= ASK_LIMIT_BYTES) return (await this.call("RecordExecution", request, options)).result;
    const deadline = Date.now() + this._timeoutMs; // the timeout bounds the ask and the record
    const limit = await this._maxMessageBytes(signalOf("record", options), deadline);
    if (limit > 0 && size > limit) {
      const { error } = tooBig(record.request_id || "", size, limit);
      throw statusError(error.code, error.message, error.details);
    }
    return (await this.call("RecordExecution", request, { ...options, [DEADLINE]: deadline })).result;
  }

  /** Suggest; `request` is a SuggestRequest ({intent, page_size, ...}) or just the intent. */
  suggest(request, options) {
    return this.call("Suggest", typeof request === "string" ? { intent: request } : request, options);
  }

  getPattern(name, options) {
    return this.call("GetPattern", { name }, options).then((r) => r.pattern);
  }

  stats(options) {
    return this.call("GetStats", {}, options);
  }

  /**
   * Upload whole records over StreamTraces. When the stream breaks (UNAVAILABLE, CANCELLED,
   * DEADLINE_EXCEEDED, or RESOURCE_EXHAUSTED with RetryInfo: a quota, the server's stream
   * limit), reconnect and resend every record not yet acknowledged, or acknowledged with an
   * error that waiting may cure (UNAVAILABLE, as while the server's index catches up after a
   * start, or RESOURCE_EXHAUSTED with RetryInfo: not captured), after `backoffMs` and never
   * before the server's RetryInfo delay (on the stream's error or those acknowledgements); once
   * the reconnects run out, that error is the record's acknowledgement. Request ids
   * (a fresh UUID for a record without one, kept across reconnects) make the resend apply
   * exactly once. Two records under one request id are refused (an error with code
   * INVALID_ARGUMENT, nothing sent). `signal` (an AbortSignal) cancels the stream in flight and
   * any reconnect: the upload rejects with `abortError` (what was acknowledged is captured).
   */
  async upload(records, options = {}) {
    const signal = signalOf("upload", options, UPLOAD_OPTIONS);
    this._open();
    const { maxReconnects = 5, onAck } = options || {};
    // a maxReconnects of text compared false with every count: reconnects without end
    if (!Number.isInteger(maxReconnects) || maxReconnects < 0) {
      throw argumentError(`pml: upload: maxReconnects ${JSON.stringify(maxReconnects)}: an integer from 0 (0: none)`, "maxReconnects");
    }
    if (onAck !== undefined && typeof onAck !== "function") {
      throw argumentError(`pml: upload: onAck is ${typeof onAck}, not a function`, "onAck");
    }
    if (!Array.isArray(records)) {
      throw invalidArgument("records: an array of ExecutionRecords (nothing was sent)", "records", `is ${kindOf(records)}, not an array of ExecutionRecords`);
    }
    const serialize = api().service.service.StreamTraces.requestSerialize;
    records.forEach((r, i) => {
      if (r === null || typeof r !== "object") {
        const description = `is ${r === null ? "null" : typeof r}, not an ExecutionRecord`;
        throw invalidArgument(`records[${i}] ${description} (nothing was sent)`, `records[${i}]`, description);
      }
      const found = violation(api().requests.lookupType("pml.v1.ExecutionRecord"), r, `records[${i}]`);
      if (found) throw refusedRequest("", found);
      try {
        // thrown from the stream's write, it left the records before it sent on an open stream
        serialize({ execution_id: "", sequence: 0, record: r });
      } catch (err) {
        const description = `does not serialize: ${err.message}`;
        throw invalidArgument(`records[${i}] ${description} (nothing was sent)`, `records[${i}]`, description);
      }
    });
    records.forEach((r, i) => {
      if (r.request_id) return;
      try {
        r.request_id = crypto.randomUUID();
      } catch {
        // a frozen record (Object.freeze, an immutable store) threw the TypeError "Cannot add
        // property request_id, object is not extensible", naming no record
        const description = "is empty and cannot be set (the record is frozen): give each record its own request id, as newRecord does";
        throw invalidArgument(`records[${i}].request_id ${description} (nothing was sent)`, `records[${i}].request_id`, description);
      }
    });
    // Acknowledgements are keyed by request id: two records under one id would share one
    // answer, and the second could go unsent behind the first's. Nothing is sent then.
    const first = new Map();
    records.forEach((r, i) => {
      if (first.has(r.request_id)) {
        const description = `${JSON.stringify(r.request_id)} repeats records[${first.get(r.request_id)}]'s: ` +
          "give each record its own request id";
        throw invalidArgument(`records[${i}].request_id ${description} (nothing was sent)`, `records[${i}].request_id`, description);
      }
      first.set(r.request_id, i);
    });
    const report = { acks: new Map(), reconnects: 0 };
    // What an async onAck's promises came to: one that rejected was an unhandled rejection,
    // the end of a Node process. The upload rejects with its error once it is done.
    const answers = [];
    const tell = (ack) => {
      if (!onAck) return;
      const answer = onAck(ack);
      if (answer !== null && typeof answer === "object" && typeof answer.then === "function") {
        answers.push(Promise.resolve(answer).then(() => null, (err) => ({ err })));
      }
    };
    const done = async () => {
      const failed = (await Promise.all(answers)).find((a) => a !== null);
      if (failed) throw failed.err;
      return report;
    };
    // A record whose message is over the server's limit would end the whole stream in
    // RESOURCE_EXHAUSTED: it is answered here, alone, and never sent.
    const limit = await this._maxMessageBytes(signal);
    if (limit > 0) {
      for (const r of records) {
        const size = serialize({ execution_id: r.request_id, sequence: records.length, record: r }).length;
        if (size > limit) {
          const ack = tooBig(r.request_id, size, limit);
          report.acks.set(r.request_id, ack);
          tell(ack);
        }
      }
    }
    let sequence = 0;
    let last = null;
    // Records the server acknowledged with an error that waiting may cure, by request id: not
    // captured, so they are sent again; each one's error answers it if the reconnects run out.
    const resend = new Map();
    for (let attempt = 0; ; attempt++) {
      const todo = records.filter((r) => !report.acks.has(r.request_id));
      if (todo.length === 0) return done();
      const held = todo.filter((r) => resend.has(r.request_id)).length;
      if (attempt > 0) {
        const broken = last && errorDetails(last);
        if (last && !CUT.has(last.code) && !worthResending(broken)) throw last;
        if (report.reconnects >= maxReconnects) {
          if (!last && held === todo.length) {
            for (const r of todo) {
              // their errors answer them
              const ack = resend.get(r.request_id);
              report.acks.set(r.request_id, ack);
              tell(ack);
            }
            return done();
          }
          throw last || new Error(`the stream ended with ${todo.length} executions unacknowledged`);
        }
        if (last || held > 0) {
          // not before the server's RetryInfo delay
          let delayMs = (broken && broken.retryDelayMs) || 0;
          for (const ack of resend.values()) delayMs = Math.max(delayMs, statusDetails(ack.error).retryDelayMs || 0);
          await sleep(backoffMs(report.reconnects, delayMs), signal);
        }
        report.reconnects++;
      }
      this._open(); // closed during the upload: not one more stream
      last = await abortable(this._connected(), signal);
      if (last) continue;
      let thrown = null;
      const onAbort = () => {
        thrown = { err: abortError(signal) };
        call.cancel();
      };
      let call;
      // Executions sent on this stream and not answered: once the server has said nothing for
      // timeoutMs while one waits (a frozen server, a dead connection: the upload waited for
      // ever), the stream is cancelled as broken (docs/api.md, Deadlines and retries).
      const waiting = new Set(todo.map((r) => r.request_id));
      let silent = false;
      let silence = null;
      const listen = () => {
        clearTimeout(silence);
        silence = waiting.size === 0 ? null : setTimeout(() => {
          silent = true;
          call.cancel();
        }, this._timeoutMs);
      };
      last = await new Promise((resolve) => {
        // waitForReady: after a broken connection the new stream waits for the reconnect
        // instead of failing at once and using up the reconnects.
        call = this.raw.StreamTraces(this._metadata({ waitForReady: true }));
        if (signal) signal.addEventListener("abort", onAbort, { once: true });
        call.on("data", (ack) => {
          const id = ack.execution_id;
          waiting.delete(id);
          listen();
          if (thrown) return;
          if (ack.error && !report.acks.has(id) && worthResending(statusDetails(ack.error))) {
            resend.set(id, ack);
            return;
          }
          resend.delete(id);
          report.acks.set(id, ack);
          try {
            tell(ack);
          } catch (err) {
            // thrown inside grpc-js's event: an uncaught exception that ended the process,
            // while the upload went on. It ends the stream and rejects the upload instead.
            thrown = { err };
            call.cancel();
          }
        });
        call.on("error", resolve);
        call.on("end", () => resolve(null));
        for (const r of todo) {
          sequence += 1;
          call.write({ execution_id: r.request_id, sequence, record: r });
        }
        call.end();
        listen();
      });
      clearTimeout(silence);
      if (silent && !thrown) {
        const message = `no answer from the server within ${this._timeoutMs} ms (${waiting.size} executions waiting)`;
        last = Object.assign(new Error(message), { code: grpc.status.DEADLINE_EXCEEDED, details: message });
      }
      if (signal) signal.removeEventListener("abort", onAbort);
      if (!thrown && signal && signal.aborted) thrown = { err: abortError(signal) };
      if (thrown) throw thrown.err;
    }
  }

  /** null once the channel is connected, or UNAVAILABLE when it is not within `timeoutMs`: a
   * stream that waits for the connection (waitForReady) has no deadline, so an upload to a
   * server that is down waited forever (clients/node/README.md). */
  _connected() {
    return new Promise((resolve) => {
      this.raw.waitForReady(Date.now() + this._timeoutMs, (err) => {
        if (!err) return resolve(null);
        const message = `no connection to ${this._target} within ${this._timeoutMs} ms (${err.message})`;
        resolve(Object.assign(new Error(message), { code: grpc.status.UNAVAILABLE, details: message }));
      });
    });
  }

  /** The server's largest request message (GetServerInfo); 0 when unknown. */
  async _maxMessageBytes(signal, deadline) {
    try {
      // asked once a stream: the upload's reconnects are its retries (a retry budget spent
      // before each reconnect made an upload to a server that is gone take seconds per stream)
      const options = { signal, [ONCE]: true, [DEADLINE]: deadline };
      return Number((await this.call("GetServerInfo", {}, options)).max_message_bytes || 0);
    } catch (err) {
      // the streams would meet a certificate failure maxReconnects times: said at once
      if (err.name === "AbortError" || certificateFailure(err) || err.clientCertificateRequired || err.tlsOnOneSide) throw err;
      return 0; // the upload meets the same error
    }
  }

  /** Closes the channel; once more does nothing. Every later call rejects at once (`_open`). */
  close() {
    this._closed = true;
    this.raw.close();
  }

  /**
   * Throws, once close() was called, CANCELLED "pml: the client is closed" (the code Go's gRPC
   * gives a call on a closed connection): a call rejected with grpc-js's "Channel has been shut
   * down" and no code, and an upload still sent its records on the closed channel
   * (clients/node/README.md).
   */
  _open() {
    if (this._closed) {
      const message = "pml: the client is closed (close() was called): nothing was sent";
      throw Object.assign(new Error(message), { code: grpc.status.CANCELLED, details: message });
    }
  }
}

/**
 * A refused argument, as the server refuses one: code INVALID_ARGUMENT, its message, and a
 * google.rpc.BadRequest naming `field` (`errorDetails(err).fieldViolations`, as of a field the
 * server refused: the Python client's contract; they had none).
 */
function invalidArgument(message, field, description) {
  return statusError(grpc.status.INVALID_ARGUMENT, message, [badRequest([{ field, description }])]);
}

/**
 * A refused argument the client takes itself (the constructor's target and options, the TLS
 * files included; a call's or an upload's options; `call`'s method), nothing sent: a TypeError,
 * as the README and index.d.ts promise, in the client's error tree as a refused request is
 * (`invalidArgument`): code INVALID_ARGUMENT and a google.rpc.BadRequest naming each of
 * `fields`, described by the message without its "pml: " (clients/node/README.md). They were
 * TypeErrors (the TLS files' plain Errors) with neither.
 */
function argumentError(message, ...fields) {
  const description = message.replace(/^pml: /, "");
  const violations = fields.map((field) => ({ field, description }));
  return statusError(grpc.status.INVALID_ARGUMENT, message, [badRequest(violations)], TypeError);
}

/** An error as grpc-js gives a refused call's: `code`, `details`, and the google.rpc.Status
 * with `details` (Anys) in its metadata, which `errorDetails` reads; a `Kind` (Error). */
function statusError(code, message, details, Kind = Error) {
  const { Status } = api();
  const status = Status.encode(Status.create({ code, message, details })).finish();
  const metadata = new grpc.Metadata();
  metadata.set("grpc-status-details-bin", Buffer.from(status));
  return Object.assign(new Kind(message), { code, details: message, metadata });
}

/** A google.rpc.BadRequest of `violations` ({field, description}) as a google.protobuf.Any. */
function badRequest(violations) {
  const { BadRequest } = api();
  return {
    type_url: "type.googleapis.com/google.rpc.BadRequest",
    value: Buffer.from(BadRequest.encode(BadRequest.create({ field_violations: violations })).finish()),
  };
}

/** A request refused before it is sent (`violation`'s finding): its message starts with
 * `prefix` (the method's name); the violation's field is its path ("record.tool_calls[0].ok",
 * an upload's "records[1].intent"). */
function refusedRequest(prefix, found) {
  const field = found.field || "request";
  return invalidArgument(`${prefix}${field} ${found.description} (nothing was sent)`, field, found.description);
}

const INT_RANGES = {
  int32: [-(2 ** 31), 2 ** 31 - 1], sint32: [-(2 ** 31), 2 ** 31 - 1], sfixed32: [-(2 ** 31), 2 ** 31 - 1],
  uint32: [0, 2 ** 32 - 1], fixed32: [0, 2 ** 32 - 1],
  int64: [-Number.MAX_SAFE_INTEGER, Number.MAX_SAFE_INTEGER], sint64: [-Number.MAX_SAFE_INTEGER, Number.MAX_SAFE_INTEGER],
  sfixed64: [-Number.MAX_SAFE_INTEGER, Number.MAX_SAFE_INTEGER],
  uint64: [0, Number.MAX_SAFE_INTEGER], fixed64: [0, Number.MAX_SAFE_INTEGER],
};
// A UTF-16 surrogate without its pair: protobufjs writes it as bytes that are not UTF-8.
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/** What `value` is, for a refusal: its type, a number as itself (NaN, 2.5), never a string's
 * text (it may be a secret). */
function kindOf(value) {
  if (value === null) return "null";
  if (Array.isArray(value)) return "an array";
  if (typeof value === "number") return `the number ${value}`;
  if (typeof value === "object") {
    const proto = Object.getPrototypeOf(value);
    return proto && proto !== Object.prototype && proto.constructor ? `a ${proto.constructor.name}` : "an object";
  }
  return `a ${typeof value}`;
}

/** The violation of one scalar or enum field's value, or null. */
function scalarViolation(field, value) {
  const { type, resolvedType } = field;
  if (resolvedType instanceof protobuf.Enum) {
    const ok = typeof value === "string" ? Object.hasOwn(resolvedType.values, value)
      : Number.isInteger(value) && Object.values(resolvedType.values).includes(value);
    return ok ? null : `is ${typeof value === "string" ? `"${value}"` : kindOf(value)}, not a value of ${resolvedType.fullName.slice(1)} (its names: ${Object.keys(resolvedType.values).join(", ")})`;
  }
  if (type === "string") {
    if (typeof value !== "string") return `is ${kindOf(value)}, not a string`;
    const lone = LONE_SURROGATE.exec(value);
    return lone ? `holds a lone surrogate U+${lone[0].charCodeAt(0).toString(16).toUpperCase()} at character ${lone.index}, which is not Unicode text (protobuf strings are UTF-8)` : null;
  }
  if (type === "bool") return typeof value === "boolean" ? null : `is ${kindOf(value)}, not a boolean`;
  if (type === "float" || type === "double") return typeof value === "number" ? null : `is ${kindOf(value)}, not a number`;
  if (type === "bytes") return value instanceof Uint8Array || typeof value === "string" ? null : `is ${kindOf(value)}, not bytes (a Buffer)`;
  const [low, high] = INT_RANGES[type];
  if (typeof value === "number" && Number.isInteger(value) && value >= low && value <= high) return null;
  // a 64-bit integer may be given as its decimal text, which protobufjs reads exactly
  if (type.endsWith("64") && typeof value === "string" && (low < 0 ? /^-?\d+$/ : /^\d+$/).test(value)) return null;
  return `is ${kindOf(value)}, not an integer from ${low} to ${high} (${type})`;
}

/**
 * The first field of `value` that is not what a `type` message holds, as {field, description}
 * (the field's path in the request, "record.tool_calls[0].ok"), or null. grpc-js serializes a
 * request with protobufjs's fromObject, which coerces what it is given: `include_flagged: "no"`
 * and a tool call's `ok: "false"` were sent true, `page_size: "5"` 5, NaN and Infinity 0, 2.5 2,
 * `intent: 5` "5", a Date as a Timestamp an empty one, a field it does not know (`pageSize`)
 * dropped; a lone surrogate was sent as bytes that are not UTF-8, which the server refused
 * naming only "request" (an upload's whole stream, its acknowledgements lost). Unset fields
 * (undefined, null) are the proto's defaults (clients/node/README.md).
 */
function violation(type, value, path = "") {
  const at = (name) => (path === "" ? name : `${path}.${name}`);
  // an object of a class is read by its own keys, as protobufjs reads it; one with none (a Date,
  // a Map, a Promise), an array or a typed array was sent as an empty message
  const proto = value !== null && typeof value === "object" ? Object.getPrototypeOf(value) : undefined;
  if (proto !== Object.prototype && proto !== null &&
      (Array.isArray(value) || Object.keys(value).length === 0 || ArrayBuffer.isView(value) || value instanceof Map || value instanceof Set)) {
    return { field: path, description: `is ${kindOf(value)}, not a ${type.fullName.slice(1)} object` };
  }
  for (const key of Object.keys(value)) {
    const field = type.fields[key];
    if (field === undefined) {
      if (Object.hasOwn(type.oneofs || {}, key)) continue; // a oneof's name, as replies carry it
      return { field: at(key), description: `is no field of ${type.fullName.slice(1)} (its fields: ${Object.keys(type.fields).join(", ")})` };
    }
    const given = value[key];
    if (given === undefined || given === null) continue;
    field.resolve();
    const each = () => (field.resolvedType ? field.resolvedType.fullName.slice(1) : field.type);
    const check = (item, name) => (field.resolvedType instanceof protobuf.Type
      ? (item !== null && typeof item === "object" ? violation(field.resolvedType, item, name) : { field: name, description: `is ${kindOf(item)}, not a ${field.resolvedType.fullName.slice(1)} object` })
      : ((d) => (d ? { field: name, description: d } : null))(scalarViolation(field, item)));
    if (field.map) {
      if (typeof given !== "object" || Array.isArray(given)) return { field: at(key), description: `is ${kindOf(given)}, not an object (a map)` };
      for (const [k, item] of Object.entries(given)) {
        const found = check(item, `${at(key)}[${JSON.stringify(k)}]`);
        if (found) return found;
      }
    } else if (field.repeated) {
      if (!Array.isArray(given)) {
        return { field: at(key), description: `is ${kindOf(given)}, not an array of ${each()} (one: [value])` };
      }
      for (let i = 0; i < given.length; i++) {
        const found = given[i] === undefined || given[i] === null
          ? { field: `${at(key)}[${i}]`, description: `is ${kindOf(given[i])}, not a ${each()}` }
          : check(given[i], `${at(key)}[${i}]`);
        if (found) return found;
      }
    } else {
      const found = check(given, at(key));
      if (found) return found;
    }
  }
  return null;
}

/** The acknowledgement of a record held back for being over the server's message limit. */
function tooBig(executionId, size, limit) {
  const details = [badRequest([{ field: "record", description: `${size} bytes as a message, over the server's limit of ${limit}` }])];
  const message = `not sent: the record is ${size} bytes as a message, over the server's --max-message-bytes of ${limit}`;
  return { execution_id: executionId, sequence: 0, error: { code: grpc.status.RESOURCE_EXHAUSTED, message, details }, outcome: "error" };
}

module.exports = { PmlClient, newRecord, errorDetails, backoffMs, PROTO_ROOT, LOADER_OPTIONS };
