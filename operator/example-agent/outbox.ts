// A fake e-mail service for the example agent. It lives in a directory, outside the agent's
// process, so it survives a crash of the sandbox: one file per idempotency key. "Send" writes the
// message to a private temporary file and then hard-links it to the key's name, which fails if the
// name exists: an atomic create-if-absent that never exposes a half-written file. A repeated
// request with the same key gets the saved receipt instead of a second e-mail.
import { randomBytes } from "node:crypto";
import { link, mkdir, readFile, readdir, unlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";

export interface Email {
  to: string;
  subject: string;
  body: string;
}

export interface Receipt {
  messageId: string;
  sentAt: string;
  /** True when the key was seen before and this is the saved receipt. */
  duplicate: boolean;
}

export function defaultOutboxDir(): string {
  return join(tmpdir(), "agent-watchdog-outbox");
}

export class Outbox {
  readonly dir: string;
  constructor(dir: string) {
    this.dir = dir;
  }

  async send(idempotencyKey: string, email: Email): Promise<Receipt> {
    if (!/^[A-Za-z0-9_-]{1,200}$/.test(idempotencyKey)) throw new Error(`bad idempotency key ${JSON.stringify(idempotencyKey)}`);
    await mkdir(this.dir, { recursive: true });
    const file = join(this.dir, `${idempotencyKey}.json`);
    const receipt = { messageId: `msg-${idempotencyKey.slice(0, 12)}`, sentAt: new Date().toISOString() };
    const temp = join(this.dir, `.${idempotencyKey}.${randomBytes(6).toString("hex")}.tmp`);
    await writeFile(temp, JSON.stringify({ ...receipt, email }), { flag: "wx" });
    try {
      await link(temp, file);
      return { ...receipt, duplicate: false };
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
      const saved = JSON.parse(await readFile(file, "utf8")) as { messageId: string; sentAt: string };
      return { messageId: saved.messageId, sentAt: saved.sentAt, duplicate: true };
    } finally {
      await unlink(temp).catch(() => {});
    }
  }

  /** Every e-mail sent, for checks. */
  async sent(): Promise<(Email & { messageId: string })[]> {
    let names: string[];
    try {
      names = await readdir(this.dir);
    } catch {
      return [];
    }
    const out = [];
    for (const name of names.filter((n) => n.endsWith(".json"))) {
      const saved = JSON.parse(await readFile(join(this.dir, name), "utf8")) as { messageId: string; email: Email };
      out.push({ ...saved.email, messageId: saved.messageId });
    }
    return out;
  }
}
