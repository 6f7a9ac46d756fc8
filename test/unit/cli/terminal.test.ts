// Text on its way to a terminal: what a sandbox can put in a run must come out inert, and what
// people write (any script, any language, emoji) must come out as it is.
import { describe, expect, it } from "vitest";
import { escapeTerminal, terminalWriter } from "../../../operator/cli/terminal.ts";
import { ACTIVE, ACTIVE_BUT_LAYOUT, HOSTILE } from "./hostile.ts";

const NORMAL = [
  "search(q=1) failed: HTTP 429, retry after 30s",
  "Grüße aus Köln; naïve café; œuvre; Ærøskøbing",
  "Ελληνικά, русский, हिन्दी, 東京の天気, 서울",
  "emoji 🚀🌧️, with ZWJ 👩‍👩‍👧 and a flag 🇩🇪, skin tone 👍🏽",
  "עברית و العربية: right-to-left letters need no override",
  "paths and quotes: C:\\temp\\x \"quoted\" 'single' `tick` ~ ^ | $HOME",
];

/** The escaped form read back (none of the texts here holds a backslash-n or backslash-u of its own). */
const readBack = (text: string) =>
  text.replace(/\\u([0-9a-f]{4})|\\([nrt])/g, (_, hex: string | undefined, short: string | undefined) =>
    hex ? String.fromCharCode(parseInt(hex, 16)) : ({ n: "\n", r: "\r", t: "\t" } as Record<string, string>)[short as string]!,
  );

describe("escaping text for a terminal", () => {
  it.each(Object.entries(HOSTILE))("makes %s inert", (_, text) => {
    const out = escapeTerminal(text);
    expect(out).not.toMatch(ACTIVE);
    expect(escapeTerminal(text, "lines")).not.toMatch(ACTIVE);
    // Nothing is dropped: every character is either kept or named.
    expect(readBack(out)).toBe(text);
  });

  it("names each character in JSON's escape form", () => {
    expect(escapeTerminal("\x1b[2J")).toBe("\\u001b[2J");
    expect(escapeTerminal("\x9b2J")).toBe("\\u009b2J");
    expect(escapeTerminal("\u202e\u2066")).toBe("\\u202e\\u2066");
    expect(escapeTerminal("\x00\x7f\x85")).toBe("\\u0000\\u007f\\u0085");
    expect(escapeTerminal("a\nb\tc\rd")).toBe("a\\nb\\tc\\rd");
  });

  it.each(NORMAL)("leaves %s as it is", (text) => {
    expect(escapeTerminal(text)).toBe(text);
    expect(escapeTerminal(text, "lines")).toBe(text);
  });

  it("keeps newlines and tabs only for text laid out in lines, never carriage returns", () => {
    expect(escapeTerminal("line 1\n\tline 2\r\n")).toBe("line 1\\n\\tline 2\\r\\n");
    expect(escapeTerminal("line 1\n\tline 2\r\n", "lines")).toBe("line 1\n\tline 2\\r\n");
  });

  it("changes nothing when it escapes twice", () => {
    for (const text of [...Object.values(HOSTILE), ...NORMAL]) expect(escapeTerminal(escapeTerminal(text))).toBe(escapeTerminal(text));
  });

  it("keeps JSON output valid JSON with the same values", () => {
    const value = { ...HOSTILE, normal: NORMAL, nested: [{ message: "\x9b2J\u202e" }] };
    const out = escapeTerminal(`${JSON.stringify(value, null, 2)}\n`, "lines");
    expect(out).not.toMatch(ACTIVE_BUT_LAYOUT);
    expect(JSON.parse(out)).toEqual(value);
  });

  it("is applied to everything a writer prints, keeping its lines", () => {
    let out = "";
    let err = "";
    const writer = terminalWriter({ out: (t) => void (out += t), err: (t) => void (err += t) });
    writer.out("NAME\tPHASE\nr\x1b[2J\tRunning\n");
    writer.err("error: \x9b2J\u202e\n");
    expect(out).toBe("NAME\tPHASE\nr\\u001b[2J\tRunning\n");
    expect(err).toBe("error: \\u009b2J\\u202e\n");
  });
});
