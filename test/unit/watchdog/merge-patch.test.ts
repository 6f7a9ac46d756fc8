import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { applyMergePatch, mergePatchDiff } from "../../../operator/watchdog/merge-patch.ts";

const json = fc.letrec((tie) => ({
  value: fc.oneof({ depthSize: "small" }, fc.integer(), fc.string({ maxLength: 3 }), fc.boolean(), tie("object"), fc.array(fc.integer(), { maxLength: 2 })),
  object: fc.dictionary(fc.constantFrom("a", "b", "c"), tie("value"), { maxKeys: 3 }),
})).object;

describe("merge patches", () => {
  it("diff then apply gives the target", () => {
    fc.assert(
      fc.property(json, json, (before, after) => {
        const patch = mergePatchDiff(before, after);
        expect(patch === undefined ? before : applyMergePatch(before, patch)).toEqual(after);
      }),
    );
  });

  it("removes nested members with null and replaces arrays whole", () => {
    expect(mergePatchDiff({ s: { a: 1, b: 2 }, l: [1, 2] }, { s: { a: 1 }, l: [2] })).toEqual({ s: { b: null }, l: [2] });
  });
});
