// The ledger's history CLI takes the database URL as the operator and the plugin do: from
// DATABASE_URL or --database-url-file, never from the command line. No database is needed: a URL
// nothing listens on shows which one was used.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { REFUSAL } from "../../../operator/cli/database-url.ts";
import { main } from "../../../operator/ledger/cli.ts";

const dir = mkdtempSync(join(tmpdir(), "ledger-cli-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

async function cli(argv: string[], env: NodeJS.ProcessEnv = {}) {
  let out = "";
  let err = "";
  const code = await main(argv, env, { out: (t) => void (out += t), err: (t) => void (err += t) });
  return { code, out, err };
}

describe("the ledger CLI's database URL", () => {
  it("is read from --database-url-file, trimmed, and wins over DATABASE_URL", async () => {
    const file = join(dir, "url");
    writeFileSync(file, "postgres://u@127.0.0.1:1/db\n");
    const result = await cli(["history", "ns", "r", `--database-url-file=${file}`], { DATABASE_URL: "postgres://u@127.0.0.1:2/db" });
    expect(result.code).toBe(1);
    expect(result.err).toMatch(/^ledger: .*127\.0\.0\.1:1\b/);
  });

  it("is refused on the command line with exit 2, without echoing it", async () => {
    const result = await cli(["history", "ns", "r", "--database-url=postgres://u:hunter2@127.0.0.1:1/db"]);
    expect(result.code).toBe(2);
    expect(result.err.split("\n")[0]).toBe(REFUSAL);
    expect(result.err).not.toContain("hunter2");
  });

  it("exits 2 naming the flag and the file when the file cannot be read, or neither is given", async () => {
    const missing = join(dir, "missing");
    const unreadable = await cli(["history", "ns", "r", "--database-url-file", missing]);
    expect(unreadable.code).toBe(2);
    expect(unreadable.err.split("\n")[0]).toBe(`--database-url-file=${missing}: cannot read the file: no such file`);
    const none = await cli(["history", "ns", "r"]);
    expect(none.code).toBe(2);
    expect(none.err.split("\n")[0]).toBe("DATABASE_URL is not set and no --database-url-file is given");
  });
});
