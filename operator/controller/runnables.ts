// What a replica runs, as controller-runtime's manager starts its runnables: some on every
// replica (the caches, so that a new leader starts warm), some only while it leads (the workers,
// the ledger's catch-up). A replica that loses the lease exits, so nothing is ever stopped on a
// lost lease here; a graceful stop is the caller's.
import type { Logger } from "pino";

export interface Runnable {
  name: string;
  /** Started only once this replica leads (without leader election: at once). */
  leaderOnly: boolean;
  start(): void | Promise<void>;
}

export class Runnables {
  private readonly all: Runnable[] = [];
  private readonly log: Logger;
  private leading = false;

  constructor(log: Logger) {
    this.log = log;
  }

  add(runnable: Runnable): void {
    this.all.push(runnable);
  }

  /** Starts what runs on every replica. */
  start(): void {
    for (const runnable of this.all) if (!runnable.leaderOnly) this.run(runnable);
  }

  /** Starts what runs on the leader only; once. */
  lead(): void {
    if (this.leading) return;
    this.leading = true;
    for (const runnable of this.all) if (runnable.leaderOnly) this.run(runnable);
  }

  private run(runnable: Runnable): void {
    // A runnable that fails to start is the operator's end: exit and let Kubernetes restart it.
    Promise.resolve()
      .then(() => runnable.start())
      .catch((err: unknown) => {
        this.log.fatal({ err: String(err), runnable: runnable.name }, "a runnable failed; exiting");
        process.exit(1);
      });
  }
}
