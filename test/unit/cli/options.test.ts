// The operator's options: where the ledger's URL comes from. It carries the database password, so
// it is taken from DATABASE_URL or a file, and the command line, which ps shows, is refused.
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { REFUSAL } from "../../../operator/cli/database-url.ts";
import { OptionsError, parseOptions, USAGE } from "../../../operator/cli/options.ts";

const dir = mkdtempSync(join(tmpdir(), "operator-options-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function file(name: string, content: string): string {
  const path = join(dir, name);
  writeFileSync(path, content);
  return path;
}

function optionsError(argv: string[], env: NodeJS.ProcessEnv = {}): OptionsError {
  try {
    parseOptions(argv, env);
  } catch (err) {
    if (err instanceof OptionsError) return err;
    throw err;
  }
  throw new Error(`expected an options error for ${argv.join(" ")}`);
}

const fromFile = "postgres://watchdog:from-file@db:5432/ledger";
const fromEnv = { DATABASE_URL: "postgres://watchdog:from-env@db:5432/ledger" };

describe("the operator's ledger URL", () => {
  it("is read from --database-url-file, trimmed", () => {
    expect(parseOptions([`--database-url-file=${file("url", `  ${fromFile}\n\n`)}`], {}).databaseUrl).toBe(fromFile);
    expect(parseOptions(["--database-url-file", file("bare", fromFile)], {}).databaseUrl).toBe(fromFile);
  });

  it("is taken from DATABASE_URL, and there is none without either", () => {
    expect(parseOptions([], fromEnv).databaseUrl).toBe(fromEnv.DATABASE_URL);
    expect(parseOptions([], {}).databaseUrl).toBeUndefined();
    expect(parseOptions([], { DATABASE_URL: "" }).databaseUrl).toBeUndefined();
  });

  it("comes from the file when both are given", () => {
    expect(parseOptions([`--database-url-file=${file("wins", fromFile)}`], fromEnv).databaseUrl).toBe(fromFile);
  });

  it("is refused on the command line, saying why and what to use instead, with or without a value", () => {
    for (const argv of [["--database-url=postgres://u:secret@h/db"], ["--database-url", "postgres://u:secret@h/db"], ["--leader-elect", "--database-url"]]) {
      expect(optionsError(argv, fromEnv).message, argv.join(" ")).toBe(REFUSAL);
    }
    expect(REFUSAL).toBe(
      "--database-url is not accepted: a password on the command line is visible to every user in ps; set DATABASE_URL or pass --database-url-file=FILE",
    );
  });

  it("stops the operator when the file cannot be read or holds nothing, naming the flag and the file", () => {
    const missing = join(dir, "missing");
    expect(optionsError([`--database-url-file=${missing}`], fromEnv).message).toBe(`--database-url-file=${missing}: cannot read the file: no such file`);
    const empty = file("empty", "\n \n");
    expect(optionsError([`--database-url-file=${empty}`], fromEnv).message).toBe(`--database-url-file=${empty}: the file is empty`);
  });

  it("must be a URL, and the error names where it came from without echoing it", () => {
    const err = optionsError([`--database-url-file=${file("bad", "watchdog hunter2 at db")}`]);
    expect(err.message).toBe("invalid options:\n  the ledger's URL (DATABASE_URL or --database-url-file): must be a postgres:// URL");
  });

  it("is documented as the file flag and DATABASE_URL, never as a flag carrying the URL", () => {
    expect(USAGE).toContain("--database-url-file=FILE");
    expect(USAGE).toContain("DATABASE_URL");
    expect(USAGE).not.toMatch(/--database-url(?!-file)/);
  });
});

describe("secure serving options", () => {
  it("serve plain HTTP with /metrics open unless asked, HTTPS with both files, /metrics behind the API server with --metrics-secure", () => {
    const plain = parseOptions([], {});
    expect(plain.metricsSecure).toBe(false);
    expect([plain.tlsCertFile, plain.tlsPrivateKeyFile]).toEqual([undefined, undefined]);
    expect(parseOptions(["--metrics-secure", "--tls-cert-file=/tls/tls.crt", "--tls-private-key-file=/tls/tls.key"], {})).toMatchObject({
      metricsSecure: true,
      tlsCertFile: "/tls/tls.crt",
      tlsPrivateKeyFile: "/tls/tls.key",
    });
  });

  it("refuse a certificate without its key, and a key without its certificate", () => {
    const message = "invalid options:\n  --tls-cert-file: --tls-cert-file and --tls-private-key-file go together: give both or neither";
    expect(optionsError(["--tls-cert-file=/tls/tls.crt"]).message).toBe(message);
    expect(optionsError(["--tls-private-key-file=/tls/tls.key"]).message).toBe(message);
  });
});

describe("the sandbox identity", () => {
  it("is a fenced identity of each run's own by default, as in the chart, so that a sandbox reports in a namespace without RBAC of its own", () => {
    const chart = readFileSync(join(import.meta.dirname, "../../../charts/agent-watchdog/values.yaml"), "utf8");
    expect(chart).toMatch(/^ {2}serviceAccount: run$/m);
    expect(parseOptions([], {}).sandboxServiceAccount).toBe("run");
    expect(USAGE).toMatch(/default run, as the chart/);
  });

  it("is the template's own only when asked, and the last flag given wins", () => {
    expect(parseOptions(["--sandbox-service-account=none"], {}).sandboxServiceAccount).toBe("none");
    expect(parseOptions(["--sandbox-service-account=none", "--sandbox-service-account=namespace"], {}).sandboxServiceAccount).toBe("namespace");
    expect(optionsError(["--sandbox-service-account=pod"]).message).toMatch(/--sandbox-service-account/);
  });
});
