// One clock for every ticking age on the page: a single interval, once a second.
//
// Two kinds of subscribers: components (useAge, <Age>), which re-render only when their own text
// changes, and the runs table's cells (tickCell), whose text node the clock rewrites in place. A
// table of 1,000 runs has 2,000 ticking cells: re-rendering them as components every second, or
// even rewriting all of them, costs a long task each second. So only the cells on screen (or
// near it) tick, a cell coming into view is brought up to date at once, and each sits in a
// size-contained box (CSS .tick) so that its new text does not lay out the whole table again.
// The text node is the one Preact rendered, so the row's next render simply writes the
// then-current age over it.
import { useEffect, useMemo, useState } from "preact/hooks";
import { ageAt } from "./format.ts";

type Listener = (now: number) => void;
const listeners = new Set<Listener>();
const cells = new Map<HTMLElement, string | undefined>();
const visible = new Set<HTMLElement>();
let timer: ReturnType<typeof setInterval> | undefined;

function write(el: HTMLElement, now: number): void {
  const node = el.firstChild;
  if (node instanceof Text) {
    const text = ageAt(cells.get(el), now);
    if (node.data !== text) node.data = text;
  }
}

const observer =
  typeof IntersectionObserver === "function"
    ? new IntersectionObserver(
        (entries) => {
          const now = Date.now();
          for (const entry of entries) {
            const el = entry.target as HTMLElement;
            if (!cells.has(el)) continue;
            if (entry.isIntersecting) {
              visible.add(el);
              write(el, now);
            } else visible.delete(el);
          }
        },
        { rootMargin: "400px 0px" },
      )
    : undefined;

function tick(): void {
  const now = Date.now();
  for (const el of visible) write(el, now);
  for (const l of listeners) l(now);
}

function start(): void {
  if (timer === undefined) timer = setInterval(tick, 1000);
}

function stopIfIdle(): void {
  if (listeners.size === 0 && cells.size === 0 && timer !== undefined) {
    clearInterval(timer);
    timer = undefined;
  }
}

function subscribe(listener: Listener): () => void {
  listeners.add(listener);
  start();
  return () => {
    listeners.delete(listener);
    stopIfIdle();
  };
}

/** Keeps the age of `iso` in `el` (whose only child is its text) current while it is on screen. */
export function tickCell(el: HTMLElement | null, iso: string | undefined): void {
  if (!el) return;
  const known = cells.has(el);
  cells.set(el, iso);
  if (!known) {
    if (observer) observer.observe(el);
    else visible.add(el);
  }
  start();
}

export function untickCell(el: HTMLElement | null): void {
  if (el && cells.delete(el)) {
    observer?.unobserve(el);
    visible.delete(el);
  }
  stopIfIdle();
}

/** The age of an ISO time, as kubectl prints it, kept current every second; "-" when none. */
export function useAge(iso: string | undefined): string {
  const [text, setText] = useState(() => ageAt(iso, Date.now()));
  useEffect(() => {
    setText(ageAt(iso, Date.now()));
    if (!iso) return undefined;
    // setState with an unchanged string renders nothing.
    return subscribe((now) => setText(ageAt(iso, now)));
  }, [iso]);
  return text;
}

/**
 * A duration the server measured (`ms`, as of when that value arrived), kept growing every second
 * while `running`. The growth is counted on the page's monotonic clock from the value's arrival, so
 * a browser whose clock disagrees with the server's still shows the server's figure moving on.
 */
export function useElapsed(ms: number | undefined, running: boolean): number | undefined {
  const arrived = useMemo(() => performance.now(), [ms]);
  const [now, setNow] = useState(arrived);
  useEffect(() => {
    setNow(performance.now());
    if (ms === undefined || !running) return undefined;
    return subscribe(() => setNow(performance.now()));
  }, [ms, running]);
  if (ms === undefined) return undefined;
  return running ? ms + Math.max(0, now - arrived) : ms;
}

export function Age({ since }: { since: string | undefined }) {
  return <>{useAge(since)}</>;
}
