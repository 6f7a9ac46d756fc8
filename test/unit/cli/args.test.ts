// The command line of kubectl agentrun: what each subcommand accepts, and how bad usage is told.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { REFUSAL } from "../../../operator/cli/database-url.ts";
import { COMMANDS, GENERAL_USAGE, parse, usage, UsageError, type Invocation } from "../../../operator/cli/plugin/args.ts";

function invocation(...argv: string[]): Invocation {
  return invocationWith({}, ...argv);
}

function invocationWith(env: NodeJS.ProcessEnv, ...argv: string[]): Invocation {
  const parsed = parse(argv, env);
  if (!("invocation" in parsed)) throw new Error(`expected a command, got help: ${parsed.help.slice(0, 40)}`);
  return parsed.invocation;
}

function usageError(...argv: string[]): UsageError {
  try {
    parse(argv, {});
  } catch (err) {
    if (err instanceof UsageError) return err;
    throw err;
  }
  throw new Error(`expected a usage error for ${argv.join(" ")}`);
}

describe("parsing kubectl agentrun's arguments", () => {
  it("parses list with its flags before or after the command, as kubectl does", () => {
    expect(invocation("list")).toEqual({ command: "list", allNamespaces: false, output: "table", force: false });
    expect(invocation("-n", "team-a", "list", "-o", "wide")).toMatchObject({ command: "list", namespace: "team-a", output: "wide" });
    expect(invocation("list", "--namespace=team-a", "--output=json")).toMatchObject({ namespace: "team-a", output: "json" });
    expect(invocation("list", "-A")).toMatchObject({ allNamespaces: true });
    expect(invocation("list", "--all-namespaces", "--kubeconfig", "/k", "--context", "ctx")).toMatchObject({
      allNamespaces: true,
      kubeconfig: "/k",
      context: "ctx",
    });
  });

  it("parses each run command with its run and own flags", () => {
    expect(invocation("describe", "r1")).toMatchObject({ command: "describe", run: "r1" });
    expect(invocation("history", "r1", "-o", "json")).toMatchObject({ command: "history", run: "r1", output: "json" });
    expect(invocation("resume", "r1")).toMatchObject({ command: "resume", run: "r1", force: false });
    expect(invocation("resume", "r1", "--force")).toMatchObject({ force: true });
    expect(invocation("approve", "r1", "--answer", "ship it")).toMatchObject({ command: "approve", answer: "ship it" });
    expect(invocation("reject", "r1", "--reason", "-1 is not a budget")).toMatchObject({ command: "reject", reason: "-1 is not a budget" });
    expect(invocation("approve", "r1", "--answer=")).toMatchObject({ answer: "" });
    expect(invocation("suspend", "r1", "-n", "ns")).toMatchObject({ command: "suspend", run: "r1", namespace: "ns" });
    expect(invocation("unsuspend", "r1")).toMatchObject({ command: "unsuspend", run: "r1" });
    expect(invocation("approve", "r1", "--answer", "go", "--approval-id", "2-ab")).toMatchObject({ answer: "go", approvalId: "2-ab" });
    expect(invocation("reject", "r1", "--approval-id=2-ab")).toMatchObject({ approvalId: "2-ab" });
  });

  it("parses console with where it listens, loopback on 8090 by default", () => {
    expect(invocation("console")).toMatchObject({ command: "console", port: 8090, address: "127.0.0.1" });
    expect(invocation("console", "--port", "0", "--address", "::1", "-n", "team-a")).toMatchObject({ port: 0, address: "::1", namespace: "team-a" });
    expect(usageError("console", "--port", "http").message).toContain("--port must be a number");
    expect(usageError("console", "--port", "70000").message).toContain("--port must be a number");
    expect(usageError("console", "r1").message).toContain("console takes no arguments");
    expect(usageError("list", "--port", "1").message).toContain("list does not take --port");
  });

  it("gives help for every command, and general help", () => {
    expect(parse(["--help"], {})).toEqual({ help: GENERAL_USAGE });
    expect(parse(["help"], {})).toEqual({ help: GENERAL_USAGE });
    for (const command of COMMANDS) {
      const help = usage(command);
      expect(help).toContain(`Usage: kubectl agentrun ${command}`);
      expect(help).toContain("--namespace");
      expect(parse([command, "--help"], {})).toEqual({ help });
      expect(parse([command, "-h"], {})).toEqual({ help });
      expect(parse(["help", command], {})).toEqual({ help });
      expect(GENERAL_USAGE).toContain(`  ${command}`);
    }
    // help wins over anything else wrong on the line
    expect(parse(["approve", "--help", "--force"], {})).toEqual({ help: usage("approve") });
  });

  it("rejects bad usage with a message naming what is wrong", () => {
    const cases: [string[], string, string | undefined][] = [
      [[], "no command given", undefined],
      [["lsit"], 'unknown command "lsit"', undefined],
      [["help", "nope"], 'unknown command "nope"', undefined],
      [["describe"], "describe needs the name of a run", "describe"],
      [["resume", "a", "b"], "resume takes one run, got 2: a b", "resume"],
      [["list", "extra"], "list takes no arguments, got: extra", "list"],
      [["list", "--bogus"], "unknown flag --bogus", "list"],
      [["list", "--force"], "list does not take --force", "list"],
      [["describe", "r", "-A"], "describe does not take -A", "describe"],
      [["approve", "r", "--reason", "x"], "approve does not take --reason", "approve"],
      [["list", "-n"], "-n needs a value", "list"],
      [["list", "-n", "-A"], "-n needs a value", "list"],
      [["list", "-o", "yaml"], 'unsupported output format "yaml" for list: use wide or json', "list"],
      [["history", "r", "-o", "wide"], 'unsupported output format "wide" for history: use json', "history"],
      [["describe", "r", "-o", "json"], "describe does not take -o", "describe"],
      [["list", "-n", "Bad_NS"], '"Bad_NS" is not a valid namespace name', "list"],
      [["describe", "../etc"], '"../etc" is not a valid run name', "describe"],
      [["resume", "r", "--force=yes"], "--force takes no value", "resume"],
    ];
    for (const [argv, message, command] of cases) {
      const err = usageError(...argv);
      expect(err.message, argv.join(" ")).toContain(message);
      expect(err.command, argv.join(" ")).toBe(command);
    }
  });

  it("accepts run names that are DNS subdomains", () => {
    expect(invocation("describe", "a.b-c.0")).toMatchObject({ run: "a.b-c.0" });
    expect(usageError("describe", "A").message).toContain("not a valid run name");
    expect(usageError("describe", "-r").message).toContain("unknown flag -r");
  });
});

describe("the ledger's URL, which never comes from the command line", () => {
  const dir = mkdtempSync(join(tmpdir(), "agentrun-args-"));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  const file = (name: string, content: string) => {
    const path = join(dir, name);
    writeFileSync(path, content);
    return path;
  };
  const fromFile = "postgres://watchdog:from-file@db:5432/ledger";
  const fromEnv = { DATABASE_URL: "postgres://watchdog:from-env@db:5432/ledger" };

  it("reads it from --database-url-file, trimmed, for each command that reads the ledger", () => {
    const path = file("url", `\n  ${fromFile}\n`);
    expect(invocation("describe", "r1", "--database-url-file", path)).toMatchObject({ databaseUrl: fromFile });
    expect(invocation("history", "r1", `--database-url-file=${path}`)).toMatchObject({ databaseUrl: fromFile });
    expect(invocation("--database-url-file", path, "console")).toMatchObject({ databaseUrl: fromFile });
    expect(usageError("list", "--database-url-file", path).message).toBe("list does not take --database-url-file");
  });

  it("takes DATABASE_URL, but only where the ledger is read, and the file over it", () => {
    expect(invocationWith(fromEnv, "history", "r1")).toMatchObject({ databaseUrl: fromEnv.DATABASE_URL });
    expect(invocationWith(fromEnv, "history", "r1", "--database-url-file", file("wins", fromFile))).toMatchObject({ databaseUrl: fromFile });
    expect(invocationWith({ DATABASE_URL: "" }, "history", "r1")).not.toHaveProperty("databaseUrl");
    expect(invocationWith(fromEnv, "list")).not.toHaveProperty("databaseUrl");
  });

  it("refuses --database-url, saying why and what to use instead, with or without a value", () => {
    for (const argv of [
      ["history", "r1", "--database-url", "postgres://u:secret@h/db"],
      ["describe", "r1", "--database-url=postgres://u:secret@h/db"],
      ["--database-url", "postgres://u:secret@h/db", "console"],
      ["list", "--database-url"],
    ]) {
      const err = usageError(...argv);
      expect(err.message, argv.join(" ")).toBe(REFUSAL);
      expect(err.command, argv.join(" ")).toBe(argv.find((a) => a === "history" || a === "describe" || a === "console" || a === "list"));
    }
    expect(REFUSAL).toBe(
      "--database-url is not accepted: a password on the command line is visible to every user in ps; set DATABASE_URL or pass --database-url-file=FILE",
    );
  });

  it("refuses a file it cannot read or that holds nothing, naming the flag and the file", () => {
    const missing = join(dir, "missing");
    expect(usageError("history", "r1", "--database-url-file", missing)).toMatchObject({
      message: `--database-url-file=${missing}: cannot read the file: no such file`,
      command: "history",
    });
    const empty = file("empty", " \n\t\n");
    expect(usageError("describe", "r1", `--database-url-file=${empty}`).message).toBe(`--database-url-file=${empty}: the file is empty`);
    expect(usageError("console", "--database-url-file", dir).message).toBe(`--database-url-file=${dir}: cannot read the file: it is a directory`);
    expect(usageError("history", "r1", "--database-url-file").message).toBe("--database-url-file needs a value");
  });

  it("documents the file and DATABASE_URL in the help of each command that reads the ledger", () => {
    for (const command of ["describe", "history", "console"] as const) {
      expect(usage(command)).toContain("--database-url-file FILE");
      expect(usage(command)).toContain("$DATABASE_URL");
      expect(usage(command)).not.toMatch(/--database-url(?!-file)/);
    }
  });
});
