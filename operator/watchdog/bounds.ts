// Everything the operator writes fits the CRD's limits (rule 12), whatever a sandbox or a user
// wrote: a long resume token, a long answer, a pod's termination message. A status write the API
// server refuses (422) would otherwise be refused forever, and with it the decision that kills a
// hung pod. Strings are cut to their maxLength (in code points, as the API server counts them) and
// lists to their maxItems (keeping the newest, which are last), by the same schema the CRD is
// generated from.
import { z } from "zod";
import { AgentRunStatus } from "../api/agentrun.ts";
import type { OperatorStatus } from "./outcome.ts";

type Schema = {
  type?: string;
  maxLength?: number;
  maxItems?: number;
  properties?: Record<string, Schema>;
  items?: Schema;
  anyOf?: Schema[];
};

const STATUS_SCHEMA = z.toJSONSchema(AgentRunStatus, { target: "openapi-3.0", io: "output", unrepresentable: "any" }) as Schema;

function fit(value: unknown, schema: Schema | undefined): unknown {
  if (!schema || value === null || value === undefined) return value;
  if (typeof value === "string") {
    if (schema.maxLength === undefined) return value;
    const points = Array.from(value);
    return points.length > schema.maxLength ? points.slice(0, schema.maxLength).join("") : value;
  }
  if (Array.isArray(value)) {
    const kept = schema.maxItems !== undefined && value.length > schema.maxItems ? value.slice(-schema.maxItems) : value;
    return kept.map((item) => fit(item, schema.items));
  }
  if (typeof value === "object") {
    const out: Record<string, unknown> = {};
    for (const [key, child] of Object.entries(value as Record<string, unknown>)) out[key] = fit(child, schema.properties?.[key]);
    return out;
  }
  return value;
}

/** The operator's status cut to the CRD's limits. */
export function withinLimits(status: OperatorStatus): OperatorStatus {
  return fit(status, STATUS_SCHEMA) as OperatorStatus;
}
