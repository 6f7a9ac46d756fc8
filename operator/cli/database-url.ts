// Where the ledger's PostgreSQL URL comes from, for every program that takes it. The URL carries
// the database password and a command line is visible in ps to every user of the machine, so it
// comes from DATABASE_URL or from a file (a mounted Secret, say), never from argv. The old flag
// is still recognised, only to refuse it with what to do instead.
import { readFileSync } from "node:fs";

/** The flag naming the file that holds the URL. */
export const DATABASE_URL_FILE = "database-url-file";

/** The flag that used to carry the URL itself. */
export const REFUSED_FLAG = "database-url";

export const REFUSAL =
  "--database-url is not accepted: a password on the command line is visible to every user in ps; set DATABASE_URL or pass --database-url-file=FILE";

/** The file cannot be read or holds nothing; the message names the flag and the file. */
export class DatabaseUrlError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "DatabaseUrlError";
  }
}

/** Whether argv gives the refused flag, as `--database-url URL` or `--database-url=URL`; what follows `--` is not a flag. */
export function givesRefusedFlag(argv: readonly string[]): boolean {
  for (const arg of argv) {
    if (arg === "--") return false;
    if (arg === `--${REFUSED_FLAG}` || arg.startsWith(`--${REFUSED_FLAG}=`)) return true;
  }
  return false;
}

/**
 * The ledger's URL: the content of `file` with surrounding whitespace trimmed (a Secret's value
 * often ends in a newline) when a file is given, otherwise DATABASE_URL; undefined for neither.
 */
export function resolveDatabaseUrl(file: string | undefined, env: NodeJS.ProcessEnv): string | undefined {
  if (file === undefined) return env.DATABASE_URL || undefined;
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    const why = code === "ENOENT" ? "no such file" : code === "EACCES" ? "permission denied" : code === "EISDIR" ? "it is a directory" : (err as Error).message;
    throw new DatabaseUrlError(`--${DATABASE_URL_FILE}=${file}: cannot read the file: ${why}`);
  }
  const url = text.trim();
  if (!url) throw new DatabaseUrlError(`--${DATABASE_URL_FILE}=${file}: the file is empty`);
  return url;
}
