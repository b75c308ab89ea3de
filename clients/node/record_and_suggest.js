// A pml client in Node, built from the same proto/pml/v1 contract as every other client.
// Usage: node record_and_suggest.js HOST:PORT   (API key, if any, in $PML_API_KEY)
// Records three executions (one of them over StreamTraces), asks for suggestions, checks that
// a bad request is refused with INVALID_ARGUMENT and BadRequest details, and prints a JSON
// summary on stdout.
"use strict";

const path = require("node:path");
const crypto = require("node:crypto");
const grpc = require("@grpc/grpc-js");
const protoLoader = require("@grpc/proto-loader");
const protobuf = require("protobufjs");

const PROTO_ROOT = path.resolve(__dirname, "..", "..", "proto");
const definition = protoLoader.loadSync("pml/v1/pml.proto", {
  includeDirs: [PROTO_ROOT],
  keepCase: true,
  longs: Number,
  enums: String,
  defaults: true,
});
const loaded = grpc.loadPackageDefinition(definition);
// Error details travel as a serialized google.rpc.Status in `grpc-status-details-bin`.
const statusRoot = new protobuf.Root();
statusRoot.resolvePath = (_origin, target) =>
  target.startsWith("google/protobuf/") ? target : path.join(PROTO_ROOT, target);
const Status = statusRoot.loadSync("google/rpc/status.proto").lookupType("google.rpc.Status");

function metadata() {
  const md = new grpc.Metadata();
  if (process.env.PML_API_KEY) md.set("authorization", `Bearer ${process.env.PML_API_KEY}`);
  return md;
}

function unary(client, method, request) {
  return new Promise((resolve, reject) => {
    client[method](request, metadata(), { deadline: Date.now() + 10000 }, (err, reply) =>
      err ? reject(err) : resolve(reply),
    );
  });
}

function record(intent, file) {
  return {
    request_id: crypto.randomUUID(),
    intent,
    code: `const d = await mcp.read_file({path: "${file}"}); return await mcp.parse_json(d)`,
    language: "typescript",
    tool_calls: [
      { tool: "read_file", ok: true, arguments_json: JSON.stringify({ path: file }) },
      { tool: "parse_json", ok: true },
    ],
  };
}

function streamOne(client, rec) {
  return new Promise((resolve, reject) => {
    const call = client.StreamTraces(metadata());
    const acks = [];
    call.on("data", (ack) => acks.push(ack));
    call.on("error", reject);
    call.on("end", () => resolve(acks));
    call.write({ execution_id: rec.request_id, sequence: 1, record: rec });
    call.end();
  });
}

async function main() {
  const target = process.argv[2];
  if (!target) throw new Error("usage: node record_and_suggest.js HOST:PORT");
  const client = new loaded.pml.v1.PmlService(target, grpc.credentials.createInsecure());
  const outcomes = [];
  for (const [intent, file] of [["Read JSON file", "a.json"], ["Parse JSON from disk", "b.json"]]) {
    const reply = await unary(client, "RecordExecution", { record: record(intent, file) });
    outcomes.push(reply.result.outcome);
  }
  const acks = await streamOne(client, record("Load JSON data", "c.json"));
  outcomes.push(acks[0].result.outcome);

  const suggestion = await unary(client, "Suggest", { intent: "Load JSON data", page_size: 3 });
  const best = suggestion.suggestions[0];

  let refused = null;
  try {
    await unary(client, "Suggest", { intent: "" });
  } catch (err) {
    const raw = err.metadata.get("grpc-status-details-bin")[0];
    const status = raw ? Status.decode(raw) : { details: [] };
    refused = {
      code: grpc.status[err.code],
      details: status.details.map((d) => d.type_url),
    };
  }
  client.close();
  process.stdout.write(
    JSON.stringify({
      outcomes,
      best: best && {
        capability: best.capability,
        tools: best.pattern.tools_used,
        usage: best.pattern.usage_count,
        score: best.score,
      },
      refused,
    }) + "\n",
  );
}

main().catch((err) => {
  process.stderr.write(`pml node client failed: ${err.stack || err}\n`);
  process.exit(1);
});
