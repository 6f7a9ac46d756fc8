// Delays the platform's timers can hold. Node's setTimeout takes at most 2^31-1 ms; a longer delay
// fires after about 1 ms instead (with a TimeoutOverflowWarning), so a long wait computed from a
// run's settings or a server's Retry-After would turn into a busy loop. Every delay the SDK
// computes from such input goes through timerDelayMs; whoever waits re-decides when the timer
// fires, so a delay cut short is only an early look.

export const MAX_TIMER_DELAY_MS = 2 ** 31 - 1;

/** `ms` as a delay setTimeout honours: between 0 and MAX_TIMER_DELAY_MS (NaN is 0). */
export function timerDelayMs(ms: number): number {
  if (!(ms > 0)) return 0;
  return Math.min(MAX_TIMER_DELAY_MS, ms);
}
