// The SDK as its own npm package (@agent-watchdog/sandbox): it imports nothing of the operator
// but the API's schemas and names, its dependencies are declared with the project's versions,
// and it reads a run exactly as the operator does, garbage included. Packing and installing it
// for real is test/integration/sdk-package.test.ts.
import { readFileSync, readdirSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { readRun as operatorReadRun } from "../../../operator/watchdog/observe.ts";
import { readRun } from "../../../operator/sandbox/read-run.ts";

const root = fileURLToPath(new URL("../../..", import.meta.url));
const sdk = join(root, "operator/sandbox");
const API_FILES = ["agentrun.ts", "annotations.ts", "api-error.ts", "decimal.ts", "defaults.ts", "duration.ts", "limits.ts", "read-run.ts", "service-account.ts", "timestamp.ts"].map((f) => join(root, "operator/api", f));

const manifest = (path: string) => JSON.parse(readFileSync(path, "utf8")) as { dependencies: Record<string, string>; [key: string]: unknown };

function imports(file: string): string[] {
  const text = readFileSync(file, "utf8");
  return [...text.matchAll(/^\s*(?:import|export)\s[^'"]*?from\s+["']([^"']+)["']/gm), ...text.matchAll(/\bimport\(\s*["']([^"']+)["']\s*\)/g)].map((m) => m[1] as string);
}

/** Every file the package compiles: its own sources and whatever they import, transitively. */
function closure(): { files: Set<string>; packages: Map<string, string[]> } {
  const files = new Set<string>();
  const packages = new Map<string, string[]>();
  const queue = readdirSync(sdk).filter((f) => f.endsWith(".ts")).map((f) => join(sdk, f));
  while (queue.length) {
    const file = queue.pop() as string;
    if (files.has(file)) continue;
    files.add(file);
    for (const specifier of imports(file)) {
      if (specifier.startsWith(".")) queue.push(resolve(dirname(file), specifier));
      else if (!specifier.startsWith("node:")) {
        const name = specifier.startsWith("@") ? specifier.split("/").slice(0, 2).join("/") : (specifier.split("/")[0] as string);
        packages.set(name, [...(packages.get(name) ?? []), relative(root, file)]);
      }
    }
  }
  return { files, packages };
}

describe("the package boundary", () => {
  it("imports only its own files and the API's schemas and names", () => {
    const outside = [...closure().files].filter((f) => !f.startsWith(`${sdk}/`) && !API_FILES.includes(f)).map((f) => relative(root, f));
    expect(outside).toEqual([]);
  });

  it("declares every package it imports, with the versions the project uses", () => {
    const own = manifest(join(sdk, "package.json"));
    const project = manifest(join(root, "package.json"));
    const used = [...closure().packages.keys()].sort();
    expect(used).toEqual(Object.keys(own.dependencies).sort());
    for (const name of used) expect(own.dependencies[name], name).toBe(project.dependencies[name]);
  });

  it("is an ESM workspace of the project whose exports point at the compiled entry and its types", () => {
    const own = manifest(join(sdk, "package.json"));
    expect(own).toMatchObject({
      name: "@agent-watchdog/sandbox",
      type: "module",
      files: ["dist"],
      exports: { ".": { types: "./dist/sandbox/index.d.ts", default: "./dist/sandbox/index.js" } },
    });
    expect((manifest(join(root, "package.json")) as { workspaces?: string[] }).workspaces).toContain("operator/sandbox");
  });
});

describe("reading the run at start", () => {
  const base = {
    apiVersion: "watchdog.dev/v1alpha1",
    kind: "AgentRun",
    metadata: { name: "r", namespace: "ns", uid: "u" },
    spec: { template: { spec: { containers: [{ name: "agent" }] } } },
  };
  const call = { id: "a1-1", name: "send", argsHash: "abc", state: "Started", attempt: 1, startedAt: "2026-11-30T12:00:00Z" };
  const cases: [string, unknown][] = [
    ["a clean run", { ...base, status: { phase: "Starting", attempt: 1, toolCalls: [call], checkpoint: { step: 2, data: { x: 1 } } } }],
    ["no status at all", base],
    ["a status that is not an object", { ...base, status: "garbage" }],
    ["garbage beside a Started call", { ...base, status: { attempt: 1, toolCalls: [42, call, { id: 7 }, null] } }],
    ["toolCalls that is not a list", { ...base, status: { toolCalls: { a: 1 } } }],
    ["more records than the CRD allows", { ...base, status: { toolCalls: Array.from({ length: 70 }, (_, i) => ({ ...call, id: `a1-${i}` })) } }],
    ["an unreadable checkpoint and heartbeat", { ...base, status: { checkpoint: { step: "two" }, heartbeat: { attempt: -1 } } }],
    ["an unreadable operator field", { ...base, status: { phase: "Dancing", approval: { state: 3 }, attempt: 1 } }],
    ["null fields", { ...base, status: { checkpoint: null, toolCalls: null, stall: null } }],
    ["an invalid spec", { ...base, spec: { template: 3 } }],
    ["invalid metadata", { ...base, metadata: { name: 5 } }],
    ["nothing", undefined],
  ];

  it.each(cases)("reads %s as the operator does", (_what, raw) => {
    expect(readRun(structuredClone(raw))).toEqual(operatorReadRun(structuredClone(raw)));
  });
});
