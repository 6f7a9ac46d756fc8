import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { parse } from "yaml";
import { renderCrdFiles } from "../../../operator/api/crd-yaml.ts";

const root = fileURLToPath(new URL("../../../", import.meta.url));

describe("crds/", () => {
  it("matches the zod schemas (run `npm run generate` after changing operator/api)", () => {
    for (const [relative, text] of Object.entries(renderCrdFiles())) {
      const committed = readFileSync(root + relative, "utf8");
      expect(committed, `${relative} is stale: run npm run generate`).toBe(text);
    }
  });

  const crd = parse(Object.values(renderCrdFiles())[0]!);
  const version = crd.spec.versions[0];
  const spec = version.schema.openAPIV3Schema.properties.spec;

  it("names the resource as the contract says", () => {
    expect(crd.metadata.name).toBe("agentruns.watchdog.dev");
    expect(crd.spec.names).toMatchObject({ kind: "AgentRun", plural: "agentruns", shortNames: ["ar"] });
    expect(crd.spec.scope).toBe("Namespaced");
    expect(version.subresources).toEqual({ status: {} });
    expect(version.additionalPrinterColumns.map((c: { name: string }) => c.name)).toEqual(
      expect.arrayContaining(["Phase", "Attempt", "Heartbeat", "Reason", "Age"]),
    );
  });

  it("does not default watchdog fields, so install defaults can apply", () => {
    expect(JSON.stringify(spec)).not.toContain('"default"');
  });

  it("describes every spec field for kubectl explain", () => {
    const missing: string[] = [];
    const walk = (node: any, path: string) => {
      if (!node.description) missing.push(path);
      for (const [k, v] of Object.entries(node.properties ?? {})) walk(v, `${path}.${k}`);
      if (node.items) walk(node.items, `${path}[]`);
    };
    walk(spec, "spec");
    expect(missing).toEqual([]);
  });

  it("checks durations, factors, counts, containers and backoff order with CEL", () => {
    const rules = JSON.stringify(spec);
    expect(spec.properties.watchdog.properties.heartbeatTimeout["x-kubernetes-validations"][0].rule).toContain("duration(self)");
    expect(spec.properties.watchdog.properties.backoff.properties.factor["x-kubernetes-validations"][0].rule).toBe("self >= 1.0");
    expect(spec.properties.watchdog.properties.maxRestarts["x-kubernetes-validations"][0].rule).toBe("self >= 0");
    expect(spec.properties.template.properties.spec.properties.containers["x-kubernetes-validations"][0].rule).toBe("size(self) >= 1");
    expect(rules).toContain("duration(self.max) >= duration(self.initial)");
  });
});
