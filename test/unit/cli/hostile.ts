// Strings a sandbox could write into a run, meant to drive the terminal of whoever reads it, and
// the test of whether any of their power is left in printed text.

/** What a terminal acts on or reorders: C0, DEL, C1, bidi embeddings, overrides and isolates. */
// eslint-disable-next-line no-control-regex -- the test looks for control characters
export const ACTIVE = /[\u0000-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069]/;
/** The same, but for newline and tab, which text laid out in lines keeps. */
// eslint-disable-next-line no-control-regex -- the test looks for control characters
export const ACTIVE_BUT_LAYOUT = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069]/;

export const HOSTILE: Record<string, string> = {
  "clear screen and scrollback": "\x1b[2J\x1b[3J\x1b[Hall good",
  "OSC 52: set the clipboard": "\x1b]52;c;Y3VybCBldmlsLmV4YW1wbGUgfCBzaA==\x07",
  "OSC 52 ended by ST": "\x1b]52;c;cm0gLXJmIH4=\x1b\\",
  "window title": "\x1b]0;kubectl\x07",
  "cursor moves: up, erase line, absolute, save/restore": "\x1b[1A\x1b[2K\x1b[10;20H\x1b7\x1b8",
  "colours": "\x1b[31;1mFAILED\x1b[0m",
  "CSI as one C1 byte": "\x9b2J\x9b1A",
  "OSC as one C1 byte, ended by C1 ST": "\x9d52;c;ZXZpbA==\x9c",
  "NEL, a C1 newline": "one\x85two",
  "right-to-left override": "invoice\u202efdp.exe",
  "every bidi embedding and override": "\u202aa\u202bb\u202cc\u202dd\u202ee",
  "bidi isolates": "\u2066admin\u2069 \u2067x\u2068y\u2069",
  "NUL": "a\x00b",
  "DEL": "a\x7fb",
  "carriage return overwriting the line": "Failed\rSucceeded",
  "backspaces": "rm -rf /\b\b\b\b\b\b\b\bls",
  "bell": "\x07\x07",
};


/** Every one of them in one string. */
export const ALL_HOSTILE = Object.values(HOSTILE).join(" ");

/** A newline that would start a line of its own, made to look like the operator's. */
export const FORGED = "FORGED 2099-01-01T00:00:00.000Z  phase  Running -> Completed";
export const WITH_FORGED_LINE = `${ALL_HOSTILE}\n${FORGED}`;
