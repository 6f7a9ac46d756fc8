// What the agent said and heard during this attempt (its text, user messages, tool outcomes,
// nudges, answers), for the agent's recent context. It lives in memory only: what must survive
// an attempt goes into the checkpoint.
export interface TranscriptEntry {
  time: string;
  role: "agent" | "user" | "tool" | "system";
  kind: string;
  text: string;
}

/** The transcript is for the agent's recent context, not an archive: the newest entries are kept. */
const MAX_TRANSCRIPT = 1000;

export class Transcript {
  readonly entries: TranscriptEntry[] = [];
  private readonly clock: () => number;

  constructor(clock: () => number) {
    this.clock = clock;
  }

  record(role: TranscriptEntry["role"], kind: string, text: string): void {
    this.entries.push({ time: new Date(this.clock()).toISOString(), role, kind, text });
    if (this.entries.length > MAX_TRANSCRIPT) this.entries.splice(0, this.entries.length - MAX_TRANSCRIPT);
  }
}
