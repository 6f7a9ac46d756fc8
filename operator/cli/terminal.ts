// Text on its way to a terminal. Much of what the CLIs print was written by a sandbox (tool
// errors and results, messages, questions) or by any user who may write a run or an Event, and a
// terminal obeys control characters in it: ESC and CSI sequences clear the screen, move the
// cursor, rewrite earlier lines, set the window title or, with OSC 52, the clipboard; bidi
// overrides show text in another order than it is stored. kubectl escapes such text since
// CVE-2021-25743; so does everything here, with one function.
//
// The escaped form is JSON's own: \n, \r and \t, and \uXXXX for every other character (ESC is
// \u001b, CSI \u009b, RIGHT-TO-LEFT OVERRIDE \u202e). It is printable ASCII, so no terminal acts
// on it and escaping twice changes nothing; it names the exact character, so whoever reads it can
// see what a sandbox tried (U+FFFD would hide that, and caret notation such as ^[ has no form for
// C1 controls or bidi characters); and it is a valid JSON escape with the same meaning, so -o json
// output passed through the same function stays valid JSON that decodes to the same values.

/** C0 controls, DEL, C1 controls, and the bidi embeddings, overrides (U+202A-U+202E) and isolates (U+2066-U+2069). */
// eslint-disable-next-line no-control-regex -- matching control characters is this module's job
const ANY_UNSAFE = /[\u0000-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069]/g;
/** The same, but for newline and tab: the layout of text printed as several lines on purpose. */
// eslint-disable-next-line no-control-regex -- matching control characters is this module's job
const UNSAFE_BUT_LAYOUT = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069]/g;

const SHORT: Record<string, string> = { "\n": "\\n", "\r": "\\r", "\t": "\\t" };

const escaped = (c: string): string => SHORT[c] ?? `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`;

/**
 * `text` made inert for a terminal. A single line (the default: a table cell, a field, a
 * timeline line) keeps no newline or tab either, so a value cannot forge further lines or break
 * a table's columns; `"lines"` keeps newlines and tabs, for output laid out in lines on purpose.
 */
export function escapeTerminal(text: string, keep: "one line" | "lines" = "one line"): string {
  return text.replace(keep === "lines" ? UNSAFE_BUT_LAYOUT : ANY_UNSAFE, escaped);
}

export interface TerminalWriter {
  out(text: string): void;
  err(text: string): void;
}

/**
 * The writer a CLI prints everything through, so that nothing reaches the terminal unescaped:
 * the formatters escape each value on its own line as well, and this catches what no formatter
 * saw (error messages from the API server, usage errors echoing the command line, JSON output).
 */
export function terminalWriter(to: TerminalWriter): TerminalWriter {
  return {
    out: (text) => to.out(escapeTerminal(text, "lines")),
    err: (text) => to.err(escapeTerminal(text, "lines")),
  };
}
