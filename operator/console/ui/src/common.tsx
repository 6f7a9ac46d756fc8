// Small pieces the pages share.
import type { ComponentChildren } from "preact";
import { useEffect } from "preact/hooks";

export const PRODUCT = "agent-watchdog console";

/** Sets the tab's title for the page shown. */
export function useTitle(title: string): void {
  useEffect(() => {
    document.title = `${title} · ${PRODUCT}`;
  }, [title]);
}

const PHASE_CLASS: Record<string, string> = {
  Pending: "idle",
  Queued: "idle",
  Starting: "active",
  Planning: "active",
  ExecutingTool: "active",
  AwaitingReply: "waiting",
  NeedsHumanIntervention: "person",
  Suspended: "suspended",
  Completed: "done",
  Failed: "failed",
};

/** The phase as text in a tinted badge (the text says it all; the tint only helps scanning). */
export function PhaseBadge({ phase }: { phase: string | undefined }) {
  if (!phase) return <span class="badge idle">-</span>;
  return <span class={`badge ${PHASE_CLASS[phase] ?? "idle"}`}>{phase}</span>;
}

/** A sentence from the server or about the connection, shown where the page's content would be. */
export function Notice({ kind, children }: { kind: "error" | "info"; children: ComponentChildren }) {
  // The live region holds the sentence alone; the label beside it says it is a problem without color.
  return (
    <div class={`notice ${kind}`}>
      {kind === "error" && (
        <span class="notice-label" aria-hidden="true">
          Problem
        </span>
      )}
      <p role={kind === "error" ? "alert" : "status"}>{children}</p>
    </div>
  );
}

/** A definition list row, skipped when there is nothing to show. */
export function Field({ label, children, always }: { label: string; children: ComponentChildren; always?: boolean }) {
  if (!always && (children === undefined || children === null || children === "")) return null;
  return (
    <div class="field">
      <dt>{label}</dt>
      <dd>{children}</dd>
    </div>
  );
}
