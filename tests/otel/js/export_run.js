// Run by tests/api/test_otlp_http.py: one agent run (an invoke_agent span and its execute_tool
// span) exported by the OpenTelemetry JavaScript SDK's OTLP/HTTP exporter (JSON) to URL.
// Usage: node export_run.js URL [batch|simple]
"use strict";

const api = require("@opentelemetry/api");
const {
  BasicTracerProvider,
  BatchSpanProcessor,
  SimpleSpanProcessor,
} = require("@opentelemetry/sdk-trace-base");
const { OTLPTraceExporter } = require("@opentelemetry/exporter-trace-otlp-http");

async function main(url, processor) {
  const exporter = new OTLPTraceExporter({ url });
  // batch: the run's spans in one Export, as agents run it in production; simple: each span
  // in its own request as it ends, the requests concurrent, so the root may arrive first
  // (docs/capture.md, "Runs split over several Exports").
  const spanProcessor =
    processor === "simple"
      ? new SimpleSpanProcessor(exporter)
      : new BatchSpanProcessor(exporter, { scheduledDelayMillis: 60000 });
  const provider = new BasicTracerProvider({ spanProcessors: [spanProcessor] });
  const tracer = provider.getTracer("js-agent");
  const messages = [{ role: "user", parts: [{ type: "text", content: "compress the folder" }] }];
  const root = tracer.startSpan("invoke_agent", {
    attributes: { "gen_ai.operation.name": "invoke_agent", "gen_ai.input.messages": JSON.stringify(messages) },
  });
  const call = tracer.startSpan(
    "execute_tool zip",
    {
      attributes: {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "zip",
        "gen_ai.tool.call.arguments": JSON.stringify({ dir: "src", level: 9 }),
      },
    },
    api.trace.setSpan(api.context.active(), root),
  );
  call.end();
  root.end();
  await provider.forceFlush();
  await provider.shutdown();
}

main(process.argv[2], process.argv[3] || "batch").then(
  () => process.stdout.write("exported\n"),
  (err) => {
    process.stderr.write(`export_run failed: ${err.stack || err}\n`);
    process.exit(1);
  },
);
