// A fake e-mail service for the example agent. It lives in a directory, outside the agent's
// process, so it survives a crash of the sandbox: one file per idempotency key. "Send" writes the
// message to a private temporary file and then hard-links it to the key's name, which fails if the
// name exists: an atomic create-if-absent that never exposes a half-written file. A repeated
// request with the same key gets the saved receipt instead of a second e-mail.
import { randomBytes } from "node:crypto";
import { createServer, type Server } from "node:http";
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

export class Outbox implements Mailer {
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

/** Where the example agent sends e-mail: a directory it shares with earlier attempts, or a service. */
export interface Mailer {
  send(idempotencyKey: string, email: Email): Promise<Receipt>;
}

/**
 * The same outbox seen from another machine: sandbox pods, each with a filesystem of its own,
 * share one outbox served over HTTP (see serveOutbox). The key travels with the request, so a
 * retried request is recognised exactly as a local one is.
 */
export class HttpOutbox implements Mailer {
  readonly url: string;
  constructor(url: string) {
    this.url = url.replace(/\/$/, "");
  }

  async send(idempotencyKey: string, email: Email): Promise<Receipt> {
    const res = await fetch(`${this.url}/send`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ idempotencyKey, email }),
      signal: AbortSignal.timeout(10_000),
    });
    if (!res.ok) throw new Error(`the outbox at ${this.url} answered ${res.status}: ${(await res.text()).slice(0, 200)}`);
    return (await res.json()) as Receipt;
  }
}

/** Serves `outbox` over HTTP (POST /send, GET /sent) on host:port; resolves to the server. */
export async function serveOutbox(outbox: Outbox, host: string, port: number): Promise<Server> {
  const server = createServer((req, res) => {
    const reply = (code: number, body: unknown) => res.writeHead(code, { "content-type": "application/json" }).end(JSON.stringify(body));
    if (req.method === "GET" && req.url === "/sent") {
      outbox.sent().then((sent) => reply(200, sent), (err: Error) => reply(500, { error: err.message }));
      return;
    }
    if (req.method !== "POST" || req.url !== "/send") return reply(404, { error: "POST /send or GET /sent" });
    let text = "";
    req.setEncoding("utf8");
    req.on("data", (chunk: string) => (text += chunk.length + text.length > 65_536 ? "" : chunk));
    req.on("end", () => {
      let request: { idempotencyKey?: unknown; email?: Email };
      try {
        request = JSON.parse(text) as typeof request;
      } catch {
        return reply(400, { error: "the body is not JSON" });
      }
      if (typeof request.idempotencyKey !== "string" || !request.email) return reply(400, { error: "idempotencyKey and email are required" });
      outbox.send(request.idempotencyKey, request.email).then((receipt) => reply(200, receipt), (err: Error) => reply(400, { error: err.message }));
    });
  });
  await new Promise<void>((resolve, reject) => server.once("error", reject).listen(port, host, () => resolve()));
  return server;
}
