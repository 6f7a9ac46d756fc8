// A stand-in for an agent, for testing the sandbox runner on its own: it reports the environment
// it was given, then exits with FAKE_EXIT after FAKE_DELAY_MS, or with FAKE_HANG=1 runs until
// it is killed. A failure is logged the way the sandbox SDK logs one (pino JSON, level error).
const keys = ["WATCHDOG_RUN_NAME", "WATCHDOG_RUN_NAMESPACE", "WATCHDOG_ATTEMPT", "KUBECONFIG", "EXAMPLE_OUTBOX_DIR", "FAKE_SHARED", "FAKE_EXIT"];
process.stdout.write(`${JSON.stringify({ level: "info", msg: "fake agent", pid: process.pid, env: Object.fromEntries(keys.map((k) => [k, process.env[k]])) })}\n`);
if (process.env.FAKE_HANG === "1") {
  setInterval(() => {}, 60_000);
} else {
  const code = Number(process.env.FAKE_EXIT ?? 0);
  setTimeout(() => {
    if (code !== 0) process.stderr.write(`${JSON.stringify({ level: "error", msg: `fake failure with exit code ${code}` })}\n`);
    process.exit(code);
  }, Number(process.env.FAKE_DELAY_MS ?? 200));
}
