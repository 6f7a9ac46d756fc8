// What a request to the console says, read defensively: its URL, the namespace or run a route
// names, and its JSON body. Anyone who can reach the port can send anything, so whatever is
// malformed becomes a BadRequest, answered with its status; none of it may throw past the
// handler (that would stop the server), and no name reaches an API path unchecked.
import type { IncomingMessage } from "node:http";
import { isDnsLabel, isDnsSubdomain } from "../api/names.ts";

/** A request the console refuses to read: answered with `status` and the message. */
export class BadRequest extends Error {
  readonly status: number;
  constructor(status: number, message: string) {
    super(message);
    this.name = "BadRequest";
    this.status = status;
  }
}

// The longest URL the pages make (a 253-character run name, a 63-character namespace) is well
// under 1 kB; the link with its token, under 100 bytes.
export const MAX_URL = 4096;
export const MAX_BODY = 64 * 1024;

/** The request's URL, parsed; one that is too long or that the URL parser refuses is a BadRequest. */
export function requestUrl(target: string | undefined): URL {
  const raw = target ?? "/";
  if (raw.length > MAX_URL) throw new BadRequest(400, `the URL is longer than ${MAX_URL} characters`);
  try {
    return new URL(raw, "http://console.invalid");
  } catch {
    throw new BadRequest(400, "the URL is malformed");
  }
}

/** The URL's path, percent-decoded; a malformed escape, or a control character such as NUL, is a BadRequest. */
export function decodedPath(url: URL): string {
  let path: string;
  try {
    path = decodeURIComponent(url.pathname);
  } catch {
    throw new BadRequest(400, "the URL's path holds a malformed percent-escape");
  }
  // eslint-disable-next-line no-control-regex -- control characters are what is refused here
  if (/[\u0000-\u001f\u007f]/.test(path)) throw new BadRequest(400, "the URL's path holds a control character");
  return path;
}

/** ?namespace=: a namespace, or undefined (every namespace) when there is none. */
export function namespaceOf(url: URL): string | undefined {
  const namespace = url.searchParams.get("namespace");
  if (!namespace) return undefined;
  if (!isDnsLabel(namespace)) throw new BadRequest(400, "namespace: not a namespace name (an RFC 1123 DNS label)");
  return namespace;
}

/** ?namespace=&name=: the run a route is about. */
export function runOf(url: URL): { namespace: string; name: string } {
  const namespace = url.searchParams.get("namespace");
  const name = url.searchParams.get("name");
  if (!isDnsLabel(namespace)) throw new BadRequest(400, "namespace: not a namespace name (an RFC 1123 DNS label)");
  if (!isDnsSubdomain(name)) throw new BadRequest(400, "name: not a run name (an RFC 1123 DNS subdomain)");
  return { namespace, name };
}

/** The body as text: 413 when larger than `limit` bytes. */
export function readBody(req: IncomingMessage, limit: number): Promise<string> {
  return new Promise((resolve, reject) => {
    let size = 0;
    const chunks: Buffer[] = [];
    const collect = (chunk: Buffer) => {
      size += chunk.length;
      if (size <= limit) return void chunks.push(chunk);
      // The rest is read and dropped rather than the socket torn down, so the client gets the
      // answer instead of a reset connection.
      req.off("data", collect);
      req.resume();
      reject(new BadRequest(413, `the request is larger than ${limit} bytes`));
    };
    req.on("data", collect);
    req.once("error", reject);
    req.once("end", () => {
      if (size <= limit) resolve(Buffer.concat(chunks).toString("utf8"));
    });
  });
}

/** The body as JSON (an empty one is {}): 413 when larger than MAX_BODY, 400 when not JSON. */
export async function readJson(req: IncomingMessage): Promise<unknown> {
  const text = await readBody(req, MAX_BODY);
  try {
    return JSON.parse(text || "{}");
  } catch (err) {
    throw new BadRequest(400, `the request is not valid JSON: ${(err as Error).message}`);
  }
}
