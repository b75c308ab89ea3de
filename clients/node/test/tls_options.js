// Run by tests/api/test_node.py: TLS options the client cannot use are refused by the
// constructor, naming the option; prints {case: message, or "took" when it constructed}.
// Usage: node test/tls_options.js DIR (a directory holding not.pem, a file that is no PEM)
"use strict";

const path = require("node:path");
const { PmlClient } = require("..");

const dir = process.argv[2];
const notPem = path.join(dir, "not.pem");
const cases = {
  keyAlone: { keyFile: notPem },
  certAlone: { certFile: notPem },
  keyAloneWithTls: { tls: true, keyFile: notPem },
  caMissing: { caFile: path.join(dir, "missing.pem") },
  caDirectory: { caFile: dir },
  caNotPem: { caFile: notPem },
  pairNotPem: { certFile: notPem, keyFile: notPem },
};
const out = {};
for (const [name, options] of Object.entries(cases)) {
  try {
    new PmlClient("127.0.0.1:1", options).close();
    out[name] = "took";
  } catch (err) {
    out[name] = err.message;
  }
}
console.log(JSON.stringify(out));
