// Builds the AgentRun CustomResourceDefinition from the zod schemas. Pure: the generator in
// hack/ writes its YAML, and a unit test compares that YAML with what is committed in crds/.
import { z } from "zod";
import {
  AgentRunSpec,
  AgentRunStatus,
  CEL_META,
  DURATION_META,
  MIN_DURATION_META,
  FREE_FORM_META,
  GROUP,
  KIND,
  PLURAL,
  SHORT_NAMES,
  SINGULAR,
  VERSION,
} from "./agentrun.ts";

type Json = Record<string, unknown>;
interface CelRule {
  rule: string;
  message?: string;
  messageExpression?: string;
  fieldPath?: string;
  reason?: string;
}

const DURATION_RE_CEL = "^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$";
const MAX_SAFE = Number.MAX_SAFE_INTEGER;

/** A CEL expression that is true when `expr` is a positive Go duration. */
export function celIsDuration(expr: string): string {
  return `${expr}.matches('${DURATION_RE_CEL}') && duration(${expr}) > duration('0s')`;
}

function durationRule(): CelRule {
  return {
    rule: celIsDuration("self"),
    messageExpression: `'must be a positive duration such as 30s, 5m or 1h30m, not ' + self`,
    reason: "FieldValueInvalid",
  };
}

// A backoff whose max is below its initial wait is a typo, not a policy; both must be valid
// durations before they can be compared, so the comparison is guarded.
const BACKOFF_MAX_RULE: CelRule = {
  rule: `!has(self.initial) || !has(self.max) || !(${celIsDuration("self.initial")}) || !(${celIsDuration("self.max")}) || duration(self.max) >= duration(self.initial)`,
  message: "max must be greater than or equal to initial",
  fieldPath: ".max",
  reason: "FieldValueInvalid",
};

/**
 * Rewrites zod's JSON Schema into a Kubernetes structural schema. With `cel`, bounds become CEL
 * rules whose messages say what is wrong (the spec, checked at kubectl apply); without it they stay
 * OpenAPI keywords, which cost the API server less on every status write (heartbeats).
 */
function toStructural(node: Json, path: string[], cel: boolean): Json {
  const out: Json = {};
  const rules: CelRule[] = [...((node["x-kubernetes-validations"] as CelRule[] | undefined) ?? [])];
  // Rules the zod schema checks with refinements, stated once in CEL beside them.
  if (cel && Array.isArray(node[CEL_META])) rules.push(...(node[CEL_META] as CelRule[]));

  if (node[FREE_FORM_META] === true && node.type === undefined) {
    // Arbitrary JSON (for example checkpoint data): structural schemas allow an untyped node only
    // when unknown fields are preserved.
    if (node.description) out.description = node.description;
    out[FREE_FORM_META] = true;
    return out;
  }

  if (node.description) out.description = node.description;
  if (node.type) out.type = node.type;
  if (node.enum) out.enum = node.enum;
  if (node.format) out.format = node.format;

  switch (node.type) {
    case "string": {
      if (node[DURATION_META] === true && cel) rules.push(durationRule());
      if (typeof node[MIN_DURATION_META] === "string" && cel) {
        const min = node[MIN_DURATION_META] as string;
        rules.push({
          rule: `!(${celIsDuration("self")}) || duration(self) >= duration('${min}')`,
          message: `must be at least ${min}`,
          reason: "FieldValueInvalid",
        });
      }
      if (node.pattern) out.pattern = node.pattern;
      if (typeof node.minLength === "number" && node.minLength > 0) out.minLength = node.minLength;
      if (typeof node.maxLength === "number") out.maxLength = node.maxLength;
      break;
    }
    case "integer":
    case "number": {
      const min = node.minimum;
      // zod's .gt(): OpenAPI 3.0 states an exclusive bound as a flag beside the minimum.
      const exclusive = node.exclusiveMinimum === true;
      // JavaScript holds integers exactly only up to 2^53, so the CRD admits no more than that.
      if (typeof min === "number" && min >= -MAX_SAFE && !cel) {
        out.minimum = min;
        if (exclusive) out.exclusiveMinimum = true;
      } else if (typeof min === "number" && min >= -MAX_SAFE) {
        const literal = node.type === "number" ? `${min}.0` : `${min}`;
        rules.push({
          rule: `self ${exclusive ? ">" : ">="} ${literal}`,
          message: `must be greater than ${exclusive ? "" : "or equal to "}${min}`,
          reason: "FieldValueInvalid",
        });
      }
      if (typeof node.maximum === "number" && node.maximum <= MAX_SAFE) out.maximum = node.maximum;
      if (node.type === "integer") out.format = "int64";
      break;
    }
    case "array": {
      out.items = toStructural(node.items as Json, [...path, "[]"], cel);
      if (typeof node.minItems === "number" && node.minItems > 0 && !cel) out.minItems = node.minItems;
      else if (typeof node.minItems === "number" && node.minItems > 0) {
        rules.push({
          rule: `size(self) >= ${node.minItems}`,
          message: `must have at least ${node.minItems} item${node.minItems === 1 ? "" : "s"}`,
          reason: "FieldValueRequired",
        });
      }
      if (typeof node.maxItems === "number") out.maxItems = node.maxItems;
      break;
    }
    case "object": {
      const properties = (node.properties as Record<string, Json> | undefined) ?? {};
      const additional = node.additionalProperties;
      if (Object.keys(properties).length > 0) {
        out.properties = Object.fromEntries(
          Object.entries(properties).map(([key, child]) => [key, toStructural(child, [...path, key], cel)]),
        );
      }
      if (Array.isArray(node.required) && node.required.length > 0) out.required = node.required;
      if (additional && typeof additional === "object" && Object.keys(additional).length > 0) {
        out.additionalProperties = toStructural(additional as Json, [...path, "*"], cel);
      } else if (additional !== false && additional !== undefined) {
        // z.looseObject(): keep fields the schema does not name (pod template, containers).
        out[FREE_FORM_META] = true;
      }
      const keys = Object.keys(properties);
      if (cel && keys.includes("initial") && keys.includes("max") && keys.includes("factor")) rules.push(BACKOFF_MAX_RULE);
      break;
    }
    case "boolean":
      break;
    default:
      throw new Error(`unsupported schema at ${path.join(".") || "<root>"}: ${JSON.stringify(node).slice(0, 200)}`);
  }

  if (rules.length > 0) out["x-kubernetes-validations"] = rules;
  return out;
}

function schemaOf(schema: z.ZodType, cel: boolean): Json {
  const json = z.toJSONSchema(schema, { target: "openapi-3.0", io: "input", unrepresentable: "any" }) as Json;
  return toStructural(json, [], cel);
}

/** The AgentRun CRD as a plain object. */
export function agentRunCrd(): Json {
  const spec = schemaOf(AgentRunSpec, true);
  const status = schemaOf(AgentRunStatus, false);
  // Conditions are a map keyed by type, as for every metav1.Condition list.
  const statusProps = status.properties as Record<string, Json>;
  const conditions = statusProps.conditions as Json;
  conditions["x-kubernetes-list-type"] = "map";
  conditions["x-kubernetes-list-map-keys"] = ["type"];

  return {
    apiVersion: "apiextensions.k8s.io/v1",
    kind: "CustomResourceDefinition",
    metadata: {
      name: `${PLURAL}.${GROUP}`,
      labels: { "app.kubernetes.io/name": "agent-watchdog", "app.kubernetes.io/component": "crd" },
    },
    spec: {
      group: GROUP,
      names: { kind: KIND, listKind: `${KIND}List`, plural: PLURAL, singular: SINGULAR, shortNames: SHORT_NAMES, categories: ["all", "watchdog"] },
      scope: "Namespaced",
      versions: [
        {
          name: VERSION,
          served: true,
          storage: true,
          subresources: { status: {} },
          additionalPrinterColumns: [
            { name: "Phase", type: "string", jsonPath: ".status.phase", description: "Where the run is in its life." },
            { name: "Attempt", type: "integer", jsonPath: ".status.attempt", description: "Current attempt." },
            { name: "Restarts", type: "integer", jsonPath: ".status.restarts", description: "Sandboxes replaced so far.", priority: 1 },
            { name: "Heartbeat", type: "date", jsonPath: ".status.heartbeat.time", description: "Age of the last heartbeat." },
            { name: "Reason", type: "string", jsonPath: ".status.reason", description: "Why the run is in its phase." },
            { name: "Pod", type: "string", jsonPath: ".status.podName", description: "The current sandbox pod.", priority: 1 },
            { name: "Age", type: "date", jsonPath: ".metadata.creationTimestamp" },
          ],
          schema: {
            openAPIV3Schema: {
              description:
                "AgentRun is one long-running AI agent run. Its work happens in a sandbox pod that heartbeats into the status; the watchdog replaces hung or crashed sandboxes, stops loops, nudges stalled agents and asks for a person when needed.",
              type: "object",
              required: ["spec"],
              properties: {
                apiVersion: { type: "string", description: "APIVersion of this object." },
                kind: { type: "string", description: "Kind of this object." },
                metadata: { type: "object" },
                spec,
                status,
              },
              "x-kubernetes-validations": [
                {
                  // The run name becomes a label value on its sandbox pods, and label values
                  // are limited to 63 characters.
                  rule: "size(self.metadata.name) <= 63",
                  message: "metadata.name must be at most 63 characters (it is used as a label value on sandbox pods)",
                  reason: "FieldValueInvalid",
                },
              ],
            },
          },
        },
      ],
    },
  };
}
