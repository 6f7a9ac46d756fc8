#!/usr/bin/env node
// kubectl-agentrun: the kubectl plugin for AgentRuns. Installed on PATH (npm install -g), it runs
// as `kubectl agentrun ...`; in a clone, `node operator/cli/kubectl-agentrun.ts ...` runs it too.

// Checked before anything else is loaded: the Kubernetes client needs Node.js 22.19 or later, and
// on an older one its import fails with an error that names neither.
const [major = 0, minor = 0] = process.versions.node.split(".").map(Number);
if (major < 22 || (major === 22 && minor < 19)) {
  process.stderr.write(`error: kubectl-agentrun needs Node.js 22.19 or later; this is ${process.version} (${process.execPath})\n`);
  process.exit(1);
}

const { main } = await import("./plugin/main.ts");
const code = await main(process.argv.slice(2), process.env);
// Exit as soon as the output is written: pooled keep-alive connections to the API server would
// otherwise hold the process open for seconds after the work is done.
await Promise.all([process.stdout, process.stderr].map((stream) => new Promise((resolve) => stream.write("", resolve))));
process.exit(code);
