// The API server's clock, as seen from this process. Every deadline the watchdog keeps is a time
// the API server recorded (a heartbeat's acceptance, a pod's creation, a Lease's renewal), so it
// must be compared with the server's time now, never with this machine's clock, which may be off
// by any amount (rule 2: no clock but the API server's decides a kill).
//
// Each response carries the server's time in its Date header, in whole seconds. A response whose
// request left at t0 and whose headers came back at t1 (this clock) says the server's time was D
// (rounded down) at some moment in between, so the offset server - local lies in (D - t1, D + 1s -
// t0]. The intersection of these intervals narrows, over responses that fall at different points of
// the server's seconds, to about the shortest round trip. It is widened a little as time passes
// (both clocks drift), and started afresh from the newest response when responses contradict it
// (this machine's clock was stepped).
//
// `now()` is the earliest the server's time can be (a deadline compared with it is never passed
// early); `upper(t)` the latest it can have been at local time t (a sighting converted with it is
// never earlier than the event it saw).

/** How much the interval widens per minute without new responses, for clock drift (NTP keeps it far smaller). */
const DRIFT_MS_PER_MINUTE = 5;
/** Until a response has been seen, the interval is this wide around the local clock. */
const UNKNOWN_MS = 0;

export class ServerClock {
  private low: number | undefined;
  private high: number | undefined;
  private at = 0;
  private readonly local: () => number;

  constructor(local: () => number = Date.now) {
    this.local = local;
  }

  /** A response with Date header `date` to a request sent at `sentAt` and answered at `receivedAt` (local ms). */
  observe(date: string | undefined, sentAt: number, receivedAt: number): void {
    const server = date === undefined ? NaN : Date.parse(date);
    if (!Number.isFinite(server) || receivedAt < sentAt) return;
    const low = server - receivedAt;
    const high = server + 1000 - sentAt;
    this.widen(receivedAt);
    if (this.low === undefined || this.high === undefined || low > this.high || high < this.low) {
      this.low = low;
      this.high = high;
    } else {
      this.low = Math.max(this.low, low);
      this.high = Math.min(this.high, high);
    }
    this.at = receivedAt;
  }

  private widen(local: number): void {
    if (this.low === undefined || this.high === undefined) return;
    const drift = (Math.max(0, local - this.at) / 60_000) * DRIFT_MS_PER_MINUTE;
    this.low -= drift;
    this.high += drift;
    this.at = local;
  }

  /** Whether a response has been seen: until then the local clock stands in. */
  get known(): boolean {
    return this.low !== undefined;
  }

  /** The server's offset bounds (server - local), ms. */
  offset(): { low: number; high: number } {
    this.widen(this.local());
    return { low: this.low ?? -UNKNOWN_MS, high: this.high ?? UNKNOWN_MS };
  }

  /** The earliest the server's time can be now. */
  now(): number {
    return Math.floor(this.local() + this.offset().low);
  }

  /** The latest the server's time can have been at local time `t`. */
  upper(t: number): number {
    return Math.ceil(t + this.offset().high);
  }

  /** The local time at which the server's time will surely have reached `serverTime`. */
  localTimeOf(serverTime: number): number {
    return Math.ceil(serverTime - this.offset().low);
  }
}
