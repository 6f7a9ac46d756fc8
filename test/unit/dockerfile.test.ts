// The container image, as far as it can be checked without building it: the Dockerfile is linted
// and held to the properties the image promises, the entrypoint runs here, and the image's
// dependency stage is replayed in a temporary directory to show that production dependencies
// alone are enough to run every command. The image itself is built by hack/images.sh and run on
// the real node in test/node/.
import { execFileSync, spawnSync } from "node:child_process";
import { cpSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { DockerfileParser, type Copy, type Instruction } from "dockerfile-ast";
import { validate } from "dockerfile-utils";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type * as Defects from "../../operator/defects.ts";

type DefectsModule = typeof Defects;

const root = fileURLToPath(new URL("../..", import.meta.url));
const dockerfileText = readFileSync(join(root, "Dockerfile"), "utf8");
const dockerfile = DockerfileParser.parse(dockerfileText);
const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as {
  dependencies: Record<string, string>;
  devDependencies: Record<string, string>;
};

interface Stage {
  name: string | undefined;
  instructions: Instruction[];
}

/** The Dockerfile's stages, each with the instructions that follow its FROM. */
function stages(): Stage[] {
  const out: Stage[] = [];
  for (const instruction of dockerfile.getInstructions()) {
    if (instruction.getKeyword() === "FROM") {
      const from = dockerfile.getFROMs().find((f) => f.getRange().start.line === instruction.getRange().start.line);
      out.push({ name: from?.getBuildStage() ?? undefined, instructions: [] });
    } else {
      out.at(-1)?.instructions.push(instruction);
    }
  }
  return out;
}

const of = (stage: Stage, keyword: string) => stage.instructions.filter((i) => i.getKeyword() === keyword);
/** The stage a COPY takes its files from (--from), or undefined for the build context. */
const copyFrom = (instruction: Instruction): string | undefined =>
  (instruction as Copy).getFlags().find((f) => f.getName() === "from")?.getValue() ?? undefined;
const jsonArgs = (instruction: Instruction): unknown => JSON.parse(instruction.getArgumentsContent() ?? "null");

function run(args: string[], options: { cwd?: string; env?: NodeJS.ProcessEnv } = {}) {
  const result = spawnSync(process.execPath, args, { cwd: options.cwd ?? root, env: options.env ?? process.env, encoding: "utf8", timeout: 60_000 });
  return { code: result.status, stdout: result.stdout, stderr: result.stderr };
}

/** The defaults of the ARGs declared before the first FROM: what the stages' FROM lines name. */
function baseImages(text: string): Record<string, string> {
  const head = text.slice(0, text.search(/^FROM /m));
  return Object.fromEntries([...head.matchAll(/^ARG (\w+)=(\S+)$/gm)].map((m) => [m[1], m[2]]));
}

describe("Dockerfile", () => {
  it("passes the linter", () => {
    expect(validate(dockerfileText).map((d) => `line ${d.range.start.line + 1}: ${d.message}`)).toEqual([]);
  });

  it("is linted for real: the linter reports a broken Dockerfile", () => {
    const broken = "FROM node:24-bookworm-slim\nUSER\nENTRYPOINT ['node', 'main.ts']\nCOPY onlyone\n";
    expect(validate(broken).length).toBeGreaterThanOrEqual(3);
  });

  it("installs with the pinned Node and runs on a distroless Node 24, both pinned by digest, never latest", () => {
    const froms = dockerfile.getFROMs();
    expect(froms.length).toBeGreaterThanOrEqual(2);
    // Every stage starts from one of the two base images, named once, before the first FROM.
    const base = baseImages(dockerfileText);
    expect(froms.map((f) => f.getImage())).toEqual(["${NODE_IMAGE}", "${NODE_IMAGE}", "${RUNTIME_IMAGE}"]);
    // The dependency stage uses the very Node version the project pins (the `node` devDependency).
    expect(base.NODE_IMAGE).toMatch(new RegExp(`^node:${pkg.devDependencies.node!.replace(/\./g, "\\.")}-bookworm-slim@sha256:[0-9a-f]{64}$`));
    // The runtime has no shell and no npm: their bytes never enter the image.
    expect(base.RUNTIME_IMAGE).toMatch(/^gcr\.io\/distroless\/nodejs24-debian12:nonroot@sha256:[0-9a-f]{64}$/);
    expect(baseImages(readFileSync(join(root, "operator/python/Dockerfile"), "utf8")).PYTHON_IMAGE).toMatch(/^python:3\.11-slim-bookworm@sha256:[0-9a-f]{64}$/);
    expect(dockerfileText).not.toMatch(/:latest\b/);
    expect(dockerfile.getInstructions().some((i) => i.getKeyword() === "ADD"), "ADD fetches and unpacks implicitly; COPY is explicit").toBe(false);
  });

  it("installs production dependencies only, from the lockfile, in a build stage", () => {
    const [deps, ...rest] = stages();
    const runs = of(deps!, "RUN").map((r) => r.getArgumentsContent() ?? "");
    expect(runs.some((r) => /\bnpm ci\b[^&|;]*--omit=dev/.test(r))).toBe(true);
    expect(runs.join("\n")).not.toMatch(/npm (install|i)\b/);
    // the runtime stage installs nothing and takes node_modules from the build stage
    const final = rest.at(-1)!;
    expect(of(final, "RUN").map((r) => r.getArgumentsContent()).join("\n")).not.toMatch(/\bnpm\b (ci|install)/);
    const fromDeps = of(final, "COPY").filter((c) => copyFrom(c) === deps!.name);
    expect(fromDeps.map((c) => c.getArguments()[0]?.getValue())).toContain("/app/node_modules");
  });

  it("copies the CRDs and the package manifests into the runtime stage, and the sources as JavaScript", () => {
    const final = stages().at(-1)!;
    const sources = of(final, "COPY")
      .filter((c) => copyFrom(c) === undefined)
      .flatMap((c) => c.getArguments().slice(0, -1).map((a) => a.getValue()));
    expect(sources).toEqual(expect.arrayContaining(["crds", "package.json", "package-lock.json"]));
    expect(sources).not.toContain("operator");
    const js = stages().find((s) => s.name === "js");
    expect(js, "a stage named js turns the sources into JavaScript").toBeDefined();
    expect(of(js!, "RUN").map((r) => r.getArgumentsContent()).join("\n")).toContain("to-javascript.mjs operator");
    const fromJs = of(final, "COPY").filter((c) => copyFrom(c) === "js");
    expect(fromJs.map((c) => c.getArguments()[0]?.getValue())).toEqual(["/app/operator"]);
  });

  it("runs as the numeric non-root user 65532, with HOME in /tmp for a read-only root filesystem", () => {
    const final = stages().at(-1)!;
    const users = of(final, "USER");
    expect(users.length).toBeGreaterThan(0);
    expect(users.at(-1)!.getArgumentsContent()).toMatch(/^65532(:65532)?$/);
    const env = of(final, "ENV").flatMap((e) => e.getArguments().map((a) => a.getValue()));
    expect(env).toContain("HOME=/tmp");
  });

  it("has one entrypoint for every command, the operator by default", () => {
    const final = stages().at(-1)!;
    expect(of(final, "ENTRYPOINT").map(jsonArgs)).toEqual([["/nodejs/bin/node", "/app/operator/cli/main.js"]]);
    expect(of(final, "CMD").map(jsonArgs)).toEqual([["operator"]]);
  });

  it("carries OCI labels", () => {
    const labels = stages().at(-1)!.instructions.filter((i) => i.getKeyword() === "LABEL").map((l) => l.getArgumentsContent()).join(" ");
    for (const key of ["title", "description", "version", "revision", "licenses"]) {
      expect(labels).toContain(`org.opencontainers.image.${key}=`);
    }
  });

  it("keeps the build context to what the image copies (.dockerignore)", () => {
    const lines = readFileSync(join(root, ".dockerignore"), "utf8").split("\n").map((l) => l.trim()).filter((l) => l && !l.startsWith("#"));
    expect(lines[0], "everything is excluded first").toBe("*");
    const allowed = lines.filter((l) => l.startsWith("!")).map((l) => l.slice(1).replace(/\/$/, ""));
    const contextSources = stages().flatMap((s) =>
      of(s, "COPY")
        .filter((c) => copyFrom(c) === undefined)
        .flatMap((c) => c.getArguments().slice(0, -1).map((a) => a.getValue().replace(/\/$/, ""))),
    );
    expect(new Set(allowed)).toEqual(new Set(contextSources));
    expect(allowed).not.toContain("node_modules");
  });
});

describe("the entrypoint, outside a container", () => {
  it("prints its usage with --help and exits 0", () => {
    const help = run(["operator/cli/main.ts", "--help"]);
    expect(help.code, help.stderr).toBe(0);
    expect(help.stdout).toMatch(/^Usage: agent-watchdog <command>/);
    for (const command of ["operator", "example-agent", "history"]) expect(help.stdout).toContain(command);
  });

  it("prints the operator's flags with operator --help and exits 0", () => {
    const help = run(["operator/cli/main.ts", "operator", "--help"]);
    expect(help.code, help.stderr).toBe(0);
    expect(help.stdout).toContain("--metrics-bind-address");
    expect(help.stdout).toContain("--leader-elect");
  });

  it("refuses an unknown command or a bad operator flag with exit code 2", () => {
    const unknown = run(["operator/cli/main.ts", "frobnicate"]);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain('unknown command "frobnicate"');
    const bad = run(["operator/cli/main.ts", "operator", "--concurrency=0"]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain("--concurrency");
  });
});

/** Every package the operator's sources import at run time (type-only imports are erased). */
/**
 * Code under operator/ that the operator's process never loads: the SDK's framework adapters and
 * their examples (their frameworks are the agent's optional peer dependencies, in the agent's
 * image), and the console's browser pages (bundled at build time).
 */
const NOT_RUNTIME = ["operator/sandbox/adapters", "operator/sandbox/examples", "operator/console/ui"].map((d) => join(root, d));

function runtimeImports(dir: string): Map<string, string[]> {
  const found = new Map<string, string[]>();
  for (const entry of readdirSync(dir)) {
    const path = join(dir, entry);
    if (NOT_RUNTIME.includes(path)) continue;
    if (statSync(path).isDirectory()) {
      for (const [name, files] of runtimeImports(path)) found.set(name, [...(found.get(name) ?? []), ...files]);
      continue;
    }
    if (!entry.endsWith(".ts")) continue;
    const text = readFileSync(path, "utf8");
    const specifiers = [
      ...text.matchAll(/^\s*import\s+(?!type\s)(?:[^'"]*?\sfrom\s+)?["']([^"']+)["']/gm),
      ...text.matchAll(/^\s*export\s+(?!type\s)[^'"]*?\sfrom\s+["']([^"']+)["']/gm),
      ...text.matchAll(/\bimport\(\s*["']([^"']+)["']\s*\)/g),
    ].map((m) => m[1] as string);
    for (const specifier of specifiers) {
      if (specifier.startsWith(".") || specifier.startsWith("node:")) continue;
      const name = specifier.startsWith("@") ? specifier.split("/").slice(0, 2).join("/") : (specifier.split("/")[0] as string);
      found.set(name, [...(found.get(name) ?? []), path.slice(root.length)]);
    }
  }
  return found;
}

describe("the image's production dependencies", () => {
  let app: string;
  let work: string;

  beforeAll(() => {
    // Replays the Dockerfile's dependency stage: the same files, the same RUN commands, in a
    // temporary /app. npm works offline from the cache `npm ci` filled, so no network is used.
    work = mkdtempSync(join(tmpdir(), "agent-watchdog-image-"));
    app = join(work, "app");
    const [deps] = stages();
    cpSync(join(root, "package.json"), join(app, "package.json"));
    cpSync(join(root, "package-lock.json"), join(app, "package-lock.json"));
    for (const instruction of of(deps!, "RUN")) {
      const command = instruction.getArgumentsContent() ?? "";
      // run on this machine only what stays inside the working directory
      expect(command, "the dependency stage's commands use relative paths only").not.toMatch(/(^|\s)\//);
      execFileSync("bash", ["-euo", "pipefail", "-c", command], {
        cwd: app,
        env: { ...process.env, npm_config_offline: "true", npm_config_update_notifier: "false" },
        stdio: ["ignore", "ignore", "pipe"],
      });
    }
    // what the runtime stage copies: the CRDs from the build context, the sources as the js stage
    // leaves them (JavaScript, by the same script)
    cpSync(join(root, "operator"), join(app, "operator"), { recursive: true });
    cpSync(join(root, "crds"), join(app, "crds"), { recursive: true });
    execFileSync(process.execPath, ["--no-warnings", join(root, "hack/image/to-javascript.mjs"), "operator"], { cwd: app, stdio: ["ignore", "ignore", "pipe"] });
  }, 180_000);

  afterAll(() => {
    if (work) rmSync(work, { recursive: true, force: true });
  });

  it("lists every package the operator imports as a production dependency", () => {
    const imports = runtimeImports(join(root, "operator"));
    expect(imports.size).toBeGreaterThan(3);
    const missing = [...imports].filter(([name]) => !(name in pkg.dependencies)).map(([name, files]) => `${name} (imported by ${files.join(", ")})`);
    expect(missing).toEqual([]);
  });

  it("has no development dependency in the production tree", () => {
    const installed = new Set(readdirSync(join(app, "node_modules")).flatMap((d) => (d.startsWith("@") ? readdirSync(join(app, "node_modules", d)).map((s) => `${d}/${s}`) : [d])));
    for (const name of Object.keys(pkg.dependencies)) expect(installed, name).toContain(name);
    for (const name of ["vitest", "typescript", "eslint", "node", "dockerfile-utils", "fast-check"]) expect(installed, name).not.toContain(name);
  });

  // With the production tree only, each command must get past loading all of its modules: a
  // missing package fails with ERR_MODULE_NOT_FOUND before any of these messages.
  const env = () => ({ PATH: process.env.PATH, HOME: "/tmp", TMPDIR: tmpdir(), NODE_ENV: "production" });
  const noMissingModule = (stderr: string) => expect(stderr).not.toMatch(/ERR_MODULE_NOT_FOUND|Cannot find (package|module)/);

  it("runs the entrypoint's help", () => {
    const help = run([join(app, "operator/cli/main.js"), "--help"], { cwd: work, env: env() });
    noMissingModule(help.stderr);
    expect(help.code).toBe(0);
  });

  it("loads the whole operator", () => {
    const help = run([join(app, "operator/cli/main.js"), "operator", "--help"], { cwd: work, env: env() });
    noMissingModule(help.stderr);
    expect(help.code, help.stderr).toBe(0);
    expect(help.stdout).toContain("--metrics-bind-address");
  });

  it("loads the example agent", () => {
    const agent = run([join(app, "operator/cli/main.js"), "example-agent"], { cwd: work, env: env() });
    noMissingModule(agent.stderr);
    expect(agent.stderr).toContain("WATCHDOG_RUN_NAME");
    expect(agent.code).toBe(2);
  });

  it("compiles out the switch that re-introduces fixed defects", async () => {
    // The operator refuses the setting with a clear message instead of running with it.
    const operator = run([join(app, "operator/cli/main.js"), "operator"], { cwd: work, env: { ...env(), AGENT_WATCHDOG_REINTRODUCE: "sandbox-clock" } });
    noMissingModule(operator.stderr);
    expect(operator.stderr).toContain("AGENT_WATCHDOG_REINTRODUCE is a development switch");
    expect(operator.code).toBe(2);
    // No module of the image reads it, and the image's switch module is off for every name.
    const sources = (dir: string): string[] => readdirSync(dir).flatMap((e) => (statSync(join(dir, e)).isDirectory() ? sources(join(dir, e)) : e.endsWith(".js") ? [join(dir, e)] : []));
    const readers = sources(join(app, "operator")).filter((f) => !f.endsWith("/operator/defects.js") && readFileSync(f, "utf8").includes("AGENT_WATCHDOG_REINTRODUCE"));
    expect(readers).toEqual([]);
    const off = (await import(join(app, "operator/defects.js"))) as DefectsModule;
    for (const name of ["sandbox-clock", "unbound-answers", "resurrected-pod", "late-naming"] as const) expect(off.reintroduced(name)).toBe(false);
    expect(readFileSync(join(app, "operator/defects.js"), "utf8")).not.toContain("process.env");
  });

  it("loads the ledger's history command", () => {
    const history = run([join(app, "operator/cli/main.js"), "history", "default", "some-run"], { cwd: work, env: env() });
    noMissingModule(history.stderr);
    expect(history.stderr).toContain("DATABASE_URL is not set");
    expect(history.code).toBe(2);
  });
});
