// The watch of the sandbox's own run, against a scripted client: it lists, watches from the
// list's version, and reconnects whenever the watch ends, without spinning on errors.
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import type { Json, SandboxApi } from "../../../operator/sandbox/api-client.ts";
import { createLogger } from "../../../operator/log.ts";
import { RunWatch } from "../../../operator/sandbox/run-watch.ts";

interface Connection {
  query: Record<string, unknown>;
  onEvent(type: string, object: Json): void;
  onDone(err: unknown): void;
}

class ScriptedClient {
  lists = 0;
  listVersion = 100;
  items: Json[] = [{ metadata: { name: "r", resourceVersion: "7" }, status: { attempt: 1 } }];
  readonly connections: Connection[] = [];
  client(): SandboxApi {
    return {
      get: async (path: string, query?: Record<string, unknown>) => {
        expect(path).toBe("/apis/watchdog.dev/v1alpha1/namespaces/ns/agentruns");
        expect(query).toEqual({ fieldSelector: "metadata.name=r" });
        this.lists++;
        return { metadata: { resourceVersion: String(this.listVersion++) }, items: structuredClone(this.items) };
      },
      watch: async (_path: string, query: Record<string, unknown>, onEvent: Connection["onEvent"], onDone: Connection["onDone"]) => {
        this.connections.push({ query, onEvent, onDone });
        return new AbortController();
      },
    } as unknown as SandboxApi;
  }
}

let watch: RunWatch | undefined;
beforeEach(() => void vi.useFakeTimers());
afterEach(() => {
  watch?.stop();
  vi.useRealTimers();
});

function start(api: ScriptedClient) {
  const seen: Json[] = [];
  const deleted = vi.fn();
  watch = new RunWatch(api.client(), "ns", "r", { onRun: (r) => seen.push(r), onDeleted: deleted }, createLogger("silent"));
  watch.start();
  return { seen, deleted, watch };
}

describe("the watch of the sandbox's run", () => {
  it("lists the run, then watches it from the list's resourceVersion, not the object's", async () => {
    const api = new ScriptedClient();
    const { seen } = start(api);
    await vi.advanceTimersByTimeAsync(0);
    expect(seen).toHaveLength(1);
    expect(api.connections).toHaveLength(1);
    expect(api.connections[0]!.query).toMatchObject({ fieldSelector: "metadata.name=r", resourceVersion: "100", allowWatchBookmarks: true });
    api.connections[0]!.onEvent("MODIFIED", { metadata: { name: "r" }, status: { attempt: 2 } });
    expect(seen.at(-1)).toMatchObject({ status: { attempt: 2 } });
  });

  it("reconnects, listing afresh, whenever the watch ends", async () => {
    const api = new ScriptedClient();
    const { seen } = start(api);
    await vi.advanceTimersByTimeAsync(0);
    api.connections[0]!.onDone(null); // the server's timeout: a clean close
    await vi.advanceTimersByTimeAsync(600);
    expect(api.lists).toBe(2);
    expect(api.connections[1]!.query.resourceVersion).toBe("101");
    expect(seen).toHaveLength(2);
    expect(watch!.restarts).toBe(1);
  });

  it("backs off while the server keeps refusing, instead of spinning", async () => {
    const api = new ScriptedClient();
    start(api);
    await vi.advanceTimersByTimeAsync(0);
    // Each new watch is refused at once (an ERROR event, then the close), for a minute.
    for (let t = 0; t < 60_000; t += 100) {
      const latest = api.connections.at(-1)!;
      if (!(latest as { refused?: boolean }).refused) {
        (latest as { refused?: boolean }).refused = true;
        latest.onEvent("ERROR", { kind: "Status", code: 410, reason: "Expired" });
        latest.onDone(null);
      }
      await vi.advanceTimersByTimeAsync(100);
    }
    // 0.5 + 1 + 2 + 4 + 8 + 10 + 10 + ... seconds: about ten tries a minute, not hundreds.
    expect(api.connections.length).toBeGreaterThanOrEqual(8);
    expect(api.connections.length).toBeLessThanOrEqual(12);
  });

  it("reports the run deleted when the list comes back empty", async () => {
    const api = new ScriptedClient();
    api.items = [];
    const { deleted } = start(api);
    await vi.advanceTimersByTimeAsync(0);
    expect(deleted).toHaveBeenCalledOnce();
    expect(api.connections).toHaveLength(0);
  });

  it("stays stopped", async () => {
    const api = new ScriptedClient();
    start(api);
    await vi.advanceTimersByTimeAsync(0);
    watch!.stop();
    api.connections[0]!.onDone(new Error("aborted"));
    await vi.advanceTimersByTimeAsync(60_000);
    expect(api.lists).toBe(1);
  });
});
