// Resolution of watchdog settings and run budgets: the run's spec.watchdog (spec.budget) field by
// field, then the install's defaults (operator configuration, from Helm values), then the built-in
// defaults below.
import type { z } from "zod";
import { BudgetSpec, WatchdogSpec, type EffectiveBudget, type EffectiveWatchdog, type ModelPrice } from "./agentrun.ts";
import { parseDuration } from "./duration.ts";

export const BUILTIN_DEFAULTS: EffectiveWatchdog = {
  heartbeatTimeout: "5m",
  maxRestarts: 3,
  backoff: { initial: "60s", factor: 2, max: "10m" },
  rateLimitBackoff: { initial: "2s", factor: 2, max: "5m" },
  maxConsecutiveToolFailures: 3,
  maxRateLimitRequeues: 10,
  stall: {
    enabled: true,
    timeout: "30s",
    maxNudges: 3,
    message: "[System] Reply chain broken (stall detected). Resume your task or reply NO_REPLY.",
  },
  releaseAwaitingAfter: "10m",
  startTimeout: "10m",
  killGracePeriod: "2s",
  unconfirmedAfter: "2m",
};

/**
 * Install-wide defaults: every field of spec.watchdog but the agent container, which only a run can
 * name; and, under `budget`, defaults for spec.budget.
 */
export const InstallDefaults = WatchdogSpec.omit({ agentContainer: true }).extend({
  budget: BudgetSpec.meta({ description: "Install-wide defaults for spec.budget, field by field." }).optional(),
});
export type InstallDefaults = z.infer<typeof InstallDefaults>;

type Layer = z.infer<typeof WatchdogSpec> | undefined;

function pick<K extends keyof EffectiveWatchdog>(key: K, layers: Layer[]): EffectiveWatchdog[K] {
  for (const layer of layers) {
    const value = layer?.[key];
    if (value !== undefined) return value as EffectiveWatchdog[K];
  }
  return BUILTIN_DEFAULTS[key];
}

function pickNested<K extends "backoff" | "rateLimitBackoff" | "stall">(key: K, layers: Layer[]): EffectiveWatchdog[K] {
  const merged: Record<string, unknown> = { ...BUILTIN_DEFAULTS[key] };
  // Walk from the weakest layer to the strongest so that stronger fields win one by one.
  for (const layer of [...layers].reverse()) {
    const nested = layer?.[key] as Record<string, unknown> | undefined;
    for (const [field, value] of Object.entries(nested ?? {})) {
      if (value !== undefined) merged[field] = value;
    }
  }
  return merged as EffectiveWatchdog[K];
}

/** Effective settings for a run: spec over install defaults over built-in defaults. */
export function resolveWatchdog(spec: Layer, install?: Layer): EffectiveWatchdog {
  const layers = [spec, install];
  return {
    heartbeatTimeout: pick("heartbeatTimeout", layers),
    maxRestarts: pick("maxRestarts", layers),
    backoff: pickNested("backoff", layers),
    rateLimitBackoff: pickNested("rateLimitBackoff", layers),
    maxConsecutiveToolFailures: pick("maxConsecutiveToolFailures", layers),
    maxRateLimitRequeues: pick("maxRateLimitRequeues", layers),
    stall: pickNested("stall", layers),
    releaseAwaitingAfter: pick("releaseAwaitingAfter", layers),
    ...(pick("approvalTimeout", layers) !== undefined ? { approvalTimeout: pick("approvalTimeout", layers) } : {}),
    startTimeout: pick("startTimeout", layers),
    // Only a run names its own containers; an install default of this would name nobody's.
    ...(spec?.agentContainer !== undefined ? { agentContainer: spec.agentContainer } : {}),
    killGracePeriod: pick("killGracePeriod", layers),
    unconfirmedAfter: pick("unconfirmedAfter", layers),
  };
}

/** Effective settings with durations in milliseconds, as the watchdog core uses them. */
export interface WatchdogSettings {
  heartbeatTimeoutMs: number;
  maxRestarts: number;
  backoff: BackoffSettings;
  rateLimitBackoff: BackoffSettings;
  maxConsecutiveToolFailures: number;
  maxRateLimitRequeues: number;
  stall: { enabled: boolean; timeoutMs: number; maxNudges: number; message: string };
  releaseAwaitingAfterMs: number;
  /** Undefined: wait for a reply forever. */
  approvalTimeoutMs?: number;
  startTimeoutMs: number;
  /** Undefined: the first container of the template. */
  agentContainer?: string;
  /** Whole seconds, as a DeleteOptions takes it: the duration rounded up, and never below 1. */
  killGracePeriodSeconds: number;
  unconfirmedAfterMs: number;
}
export interface BackoffSettings {
  initialMs: number;
  factor: number;
  maxMs: number;
}

export function toSettings(effective: EffectiveWatchdog): WatchdogSettings {
  const backoff = (b: EffectiveWatchdog["backoff"]): BackoffSettings => ({
    initialMs: parseDuration(b.initial),
    factor: b.factor,
    maxMs: parseDuration(b.max),
  });
  return {
    heartbeatTimeoutMs: parseDuration(effective.heartbeatTimeout),
    maxRestarts: effective.maxRestarts,
    backoff: backoff(effective.backoff),
    rateLimitBackoff: backoff(effective.rateLimitBackoff),
    maxConsecutiveToolFailures: effective.maxConsecutiveToolFailures,
    maxRateLimitRequeues: effective.maxRateLimitRequeues ?? (BUILTIN_DEFAULTS.maxRateLimitRequeues as number),
    stall: {
      enabled: effective.stall.enabled,
      timeoutMs: parseDuration(effective.stall.timeout),
      maxNudges: effective.stall.maxNudges,
      message: effective.stall.message,
    },
    releaseAwaitingAfterMs: parseDuration(effective.releaseAwaitingAfter),
    ...(effective.approvalTimeout ? { approvalTimeoutMs: parseDuration(effective.approvalTimeout) } : {}),
    startTimeoutMs: parseDuration(effective.startTimeout),
    ...(effective.agentContainer ? { agentContainer: effective.agentContainer } : {}),
    killGracePeriodSeconds: Math.max(1, Math.ceil(parseDuration(effective.killGracePeriod) / 1000)),
    unconfirmedAfterMs: parseDuration(effective.unconfirmedAfter),
  };
}

// ---------------------------------------------------------------------------------------------
// run budgets

/** warnAt when neither the run nor the install sets it. */
export const BUILTIN_WARN_AT = 0.8;

/** The limits that apply to a run, with durations in milliseconds, as the watchdog core uses them. */
export interface BudgetSettings {
  tokens?: number;
  inputTokens?: number;
  outputTokens?: number;
  cost?: { amount: string; currency: string };
  wallClock?: string;
  wallClockMs?: number;
  toolCalls?: number;
  warnAt: number;
  /** The run's prices, then the install's for models the run does not price. */
  prices: ModelPrice[];
}

/** Effective budget for a run: spec.budget over the install's budget defaults, field by field. */
export function resolveBudget(spec: BudgetSpec | undefined, install: BudgetSpec | undefined): BudgetSettings {
  const pickField = <K extends keyof BudgetSpec>(key: K): BudgetSpec[K] => spec?.[key] ?? install?.[key];
  const own = spec?.prices ?? [];
  const priced = new Set(own.map((p) => p.model));
  const settings: BudgetSettings = {
    warnAt: pickField("warnAt") ?? BUILTIN_WARN_AT,
    prices: [...own, ...(install?.prices ?? []).filter((p) => !priced.has(p.model))],
  };
  for (const key of ["tokens", "inputTokens", "outputTokens", "toolCalls"] as const) {
    const value = pickField(key);
    if (value !== undefined) settings[key] = value;
  }
  const cost = pickField("cost");
  if (cost) settings.cost = { amount: cost.amount, currency: cost.currency };
  const wallClock = pickField("wallClock");
  if (wallClock !== undefined) {
    settings.wallClock = wallClock;
    settings.wallClockMs = parseDuration(wallClock);
  }
  return settings;
}

/** Whether any limit applies. */
export const hasLimits = (b: BudgetSettings) =>
  b.tokens !== undefined || b.inputTokens !== undefined || b.outputTokens !== undefined || b.cost !== undefined || b.wallClock !== undefined || b.toolCalls !== undefined;

/** What status.budget shows: the effective limits, or nothing when no limit applies. */
export function effectiveBudget(b: BudgetSettings): EffectiveBudget | undefined {
  if (!hasLimits(b)) return undefined;
  return {
    ...(b.tokens !== undefined ? { tokens: b.tokens } : {}),
    ...(b.inputTokens !== undefined ? { inputTokens: b.inputTokens } : {}),
    ...(b.outputTokens !== undefined ? { outputTokens: b.outputTokens } : {}),
    ...(b.cost ? { cost: { ...b.cost } } : {}),
    ...(b.wallClock !== undefined ? { wallClock: b.wallClock } : {}),
    ...(b.toolCalls !== undefined ? { toolCalls: b.toolCalls } : {}),
    warnAt: b.warnAt,
  };
}
