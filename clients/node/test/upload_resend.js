// Run by tests/api/test_node.py: uploads 300 records through a TCP proxy that breaks every
// connection after the 10th acknowledgement, then prints {acks, reconnects, executions}.
// Usage: node test/upload_resend.js HOST:PORT
"use strict";

const net = require("node:net");
const { PmlClient, newRecord } = require("..");

function proxyTo(target) {
  const [host, port] = [target.slice(0, target.lastIndexOf(":")), Number(target.slice(target.lastIndexOf(":") + 1))];
  const sockets = new Set();
  const server = net.createServer((down) => {
    const up = net.connect(port, host);
    for (const s of [down, up]) {
      sockets.add(s);
      s.on("close", () => sockets.delete(s));
      s.on("error", () => {});
    }
    down.pipe(up);
    up.pipe(down);
  });
  return new Promise((resolve) =>
    server.listen(0, "127.0.0.1", () =>
      resolve({
        address: `127.0.0.1:${server.address().port}`,
        cut: () => sockets.forEach((s) => s.destroy()),
        close: () => server.close(),
      }),
    ),
  );
}

async function main(target) {
  const proxy = await proxyTo(target);
  const pml = new PmlClient(proxy.address);
  const records = [];
  for (let i = 0; i < 300; i++) {
    const tool = `tool_${i % 4}`;
    records.push(newRecord(`task ${i}`, `await mcp.${tool}(x)`, "typescript", [{ tool, ok: true }]));
  }
  let acked = 0;
  const report = await pml.upload(records, {
    onAck: () => {
      acked += 1;
      if (acked === 10) proxy.cut();
    },
  });
  const refused = [...report.acks.values()].filter((a) => !a.result).length;
  const stats = await pml.stats();
  pml.close();
  proxy.cut();
  proxy.close();
  return { acks: report.acks.size, refused, reconnects: report.reconnects, executions: stats.executions, patterns: stats.patterns };
}

main(process.argv[2]).then(
  (summary) => process.stdout.write(JSON.stringify(summary) + "\n"),
  (err) => {
    process.stderr.write(`upload_resend failed: ${err.stack || err}\n`);
    process.exit(1);
  },
);
