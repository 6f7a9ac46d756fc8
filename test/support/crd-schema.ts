// The generated CRD's own OpenAPI schema as a validator, for checking that what the operator writes
// fits the CRD (rule 12) without an API server. CEL rules are not evaluated here (the status schema
// has none: its bounds are OpenAPI keywords); the x-kubernetes-* keywords are annotations to it.
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { Ajv, type ErrorObject, type ValidateFunction } from "ajv";
import addFormats from "ajv-formats";
import { parse as parseYaml } from "yaml";

const root = fileURLToPath(new URL("../..", import.meta.url));

type Json = Record<string, any>;

function schemaOf(part: "status" | "spec"): Json {
  const crd = parseYaml(readFileSync(`${root}crds/watchdog.dev_agentruns.yaml`, "utf8")) as Json;
  return crd.spec.versions[0].schema.openAPIV3Schema.properties[part];
}

let status: ValidateFunction | undefined;

/** Problems with `value` as status of the CRD; empty when the API server's schema accepts it. */
export function crdStatusProblems(value: unknown): string[] {
  if (!status) {
    const ajv = new Ajv({ strict: false, allErrors: true });
    addFormats.default(ajv);
    // int64 integers carry a format the OpenAPI schema defines and JSON Schema does not.
    ajv.addFormat("int64", { type: "number", validate: (n: number) => Number.isSafeInteger(n) });
    status = ajv.compile(schemaOf("status"));
  }
  if (status(value)) return [];
  return (status.errors ?? []).map((e: ErrorObject) => `${e.instancePath || "/"} ${e.message ?? ""}`);
}
