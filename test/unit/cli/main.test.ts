// kubectl agentrun end to end without a cluster: exit codes, where help and errors go, and that
// no failure ever prints a stack trace.
import { describe, expect, it } from "vitest";
import { REFUSAL } from "../../../operator/cli/database-url.ts";
import { GENERAL_USAGE, usage } from "../../../operator/cli/plugin/args.ts";
import { main } from "../../../operator/cli/plugin/main.ts";

async function run(argv: string[], env: NodeJS.ProcessEnv = {}) {
  let out = "";
  let err = "";
  const code = await main(argv, env, { out: (t) => void (out += t), err: (t) => void (err += t) });
  return { code, out, err };
}

describe("kubectl agentrun's exit codes and output", () => {
  it("prints help on stdout and exits 0", async () => {
    expect(await run(["--help"])).toEqual({ code: 0, out: `${GENERAL_USAGE}\n`, err: "" });
    expect(await run(["history", "--help"])).toEqual({ code: 0, out: `${usage("history")}\n`, err: "" });
  });

  it("prints the error and the command's usage on stderr and exits 2 on bad usage", async () => {
    expect(await run([])).toEqual({ code: 2, out: "", err: `error: no command given\n\n${GENERAL_USAGE}\n` });
    expect(await run(["approve"])).toEqual({ code: 2, out: "", err: `error: approve needs the name of a run\n\n${usage("approve")}\n` });
  });

  it("refuses the ledger's URL on the command line with exit 2, without echoing it", async () => {
    const result = await run(["history", "r", "-n", "ns", "--database-url", "postgres://u:hunter2@127.0.0.1:1/db"], { KUBECONFIG: "/nonexistent/kubeconfig" });
    expect(result).toEqual({ code: 2, out: "", err: `error: ${REFUSAL}\n\n${usage("history")}\n` });
    expect(result.err).not.toContain("hunter2");
  });

  it("exits 2 naming the flag and the file when --database-url-file cannot be read", async () => {
    const result = await run(["describe", "r", "-n", "ns", "--database-url-file=/nonexistent/database-url"], { KUBECONFIG: "/nonexistent/kubeconfig" });
    expect(result).toEqual({ code: 2, out: "", err: `error: --database-url-file=/nonexistent/database-url: cannot read the file: no such file\n\n${usage("describe")}\n` });
  });

  it("exits 1 with one line when the kubeconfig is unusable", async () => {
    const result = await run(["describe", "r"], { KUBECONFIG: "/nonexistent/kubeconfig" });
    expect(result).toEqual({ code: 1, out: "", err: "error: none of the files in KUBECONFIG exists: /nonexistent/kubeconfig\n" });
  });

  it("exits 1 with one line when the ledger URL is unusable, before touching the cluster", async () => {
    // -n is given, so the namespace needs no kubeconfig; the ledger is asked first and fails, then
    // the fallback to the cluster fails on the missing kubeconfig: both say so in a line each.
    const result = await run(["history", "r", "-n", "ns"], { KUBECONFIG: "/nonexistent/kubeconfig", DATABASE_URL: "postgres://u@127.0.0.1:1/db" });
    expect(result.code).toBe(1);
    expect(result.err).toBe(
      "warning: cannot reach the ledger at 127.0.0.1:1/db: connection refused; showing what the cluster still holds\nerror: none of the files in KUBECONFIG exists: /nonexistent/kubeconfig\n",
    );
  });
});
