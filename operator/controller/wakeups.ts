// Wake-ups scheduled from each plan's next deadline. Unlike the queue's delays, a new wake-up
// for a run replaces the old one: a heartbeat moves the hung deadline later, and the earlier
// timer must not fire for nothing.

/** setTimeout cannot wait longer than 2^31-1 ms; longer waits are re-armed in steps. */
const MAX_TIMER_MS = 2_147_483_647;

export class Wakeups {
  private readonly timers = new Map<string, { at: number; timer: NodeJS.Timeout }>();
  private readonly fire: (key: string) => void;
  private readonly clock: () => number;

  constructor(fire: (key: string) => void, clock: () => number = Date.now) {
    this.fire = fire;
    this.clock = clock;
  }

  /** Wakes `key` at `at` (ms since epoch), replacing any earlier schedule; undefined cancels. */
  set(key: string, at: number | undefined): void {
    const current = this.timers.get(key);
    if (current && current.at === at) return;
    if (current) clearTimeout(current.timer);
    this.timers.delete(key);
    if (at === undefined) return;
    const delay = Math.max(0, at - this.clock());
    const timer = setTimeout(() => {
      this.timers.delete(key);
      if (at - this.clock() > 0) this.set(key, at);
      else this.fire(key);
    }, Math.min(delay, MAX_TIMER_MS));
    timer.unref?.();
    this.timers.set(key, { at, timer });
  }

  get(key: string): number | undefined {
    return this.timers.get(key)?.at;
  }

  get size(): number {
    return this.timers.size;
  }

  clear(): void {
    for (const { timer } of this.timers.values()) clearTimeout(timer);
    this.timers.clear();
  }
}
