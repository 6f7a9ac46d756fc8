// Prints, as JSON, what the TypeScript SDK computes for the cases in ts_fixtures.py (canonicalJson,
// argsHash, idempotencyKey, encodeResult). Run from the repository root:
//   nice -n 19 node_modules/node/bin/node operator/python/tests/gen_ts_fixtures.mjs
// and carry changed values over into ts_fixtures.py.
const { argsHash, canonicalJson, idempotencyKey } = await import(new URL("../../sandbox/keys.ts", import.meta.url));
const { encodeResult } = await import(new URL("../../sandbox/protocol.ts", import.meta.url));
const texts = [
  '{"to":"x@example.com","meta":{"b":1,"a":[{"y":2,"x":1}]}}',
  '{}', '[]', 'null', '"text"', '{"n":1}', '{"n":"1"}', '[1,2]', '[2,1]', 'true', '0',
  '[0,-0,1.0,-1.5,0.1,1e21,1e20,123456789012345678901234,1e-7,1.5e-7,0.000001,1e300,5e-324,12345678901234567890,9007199254740993,3.14159,100,2.5e25,-1e-10,0.3,1.7976931348623157e308,2e-6,123e-20,4.35,1e16,123456.789]',
  '{"b":1,"10":2,"9":3,"a":0,"01":4,"4294967294":5,"4294967295":6,"-1":7,"1.5":8,"":9,"A":10}',
  '{"é":"ü","\\uffff":1,"😀":2,"z":"\\u0000\\u001f\\u007f\\u2028\\"\\\\\\/\\b\\f\\n\\r\\t","lone":"\\ud800x\\udc00","pair":"\\ud83d\\ude00"}',
  '{"a":{"c":[{"e":null,"d":true}],"b":false}}',
  '{"query":"SELECT * FROM t WHERE x = \'y\'","limit":10,"filters":[{"field":"ts","op":">=","value":"2026-01-01T00:00:00Z"}]}',
];
const out = { json: [], special: {}, keys: [], results: [] };
for (const t of texts) {
  const v = JSON.parse(t);
  out.json.push({ input: t, canonical: canonicalJson(v), argsHash: argsHash(v) });
}
out.special.nonFinite = { canonical: canonicalJson([NaN, Infinity, -Infinity]), argsHash: argsHash([NaN, Infinity, -Infinity]) };
out.special.date = { canonical: canonicalJson({ at: new Date("2026-01-01T00:00:00.123Z") }), argsHash: argsHash({ at: new Date("2026-01-01T00:00:00.123Z") }) };
out.special.undefined = { canonical: canonicalJson(undefined), argsHash: argsHash(undefined) };
for (const c of [
  { runUid: "uid-1", step: 2, index: 0, name: "send_email", argsHash: argsHash({ to: "a" }) },
  { runUid: "uid-r", step: 1, index: 0, name: "t", argsHash: argsHash({}) },
  { runUid: "3f1c9a2e-7b4d-4e8a-9c0f-1a2b3c4d5e6f", step: 7, index: 3, name: "charge_card", argsHash: argsHash({ cents: 1299, currency: "EUR", customer: { id: "c-42", tags: ["vip"] } }) },
  { runUid: "uid-ü", step: 1, index: 12, name: "wörk", argsHash: argsHash({ "😀": 1 }) },
  { runUid: "uid-r", step: 1, index: 0, name: "search", argsHash: argsHash({ q: "x" }) },
  { runUid: "uid-r", step: 1, index: 1, name: "search", argsHash: argsHash({ q: "x" }) },
  { runUid: "uid-r", step: 2, index: 0, name: "search", argsHash: argsHash({ q: "x" }) },
]) out.keys.push({ ...c, key: idempotencyKey(c) });
const { createHash } = await import("node:crypto");
for (const v of [{ answer: 42 }, "x".repeat(9000), { text: "é\n".repeat(5000) }, { text: "😀".repeat(5000) }, [1.0, 1e21, null]]) {
  const e = encodeResult(v);
  out.results.push({ input: v, length: e.length, sha256: createHash("sha256").update(e).digest("hex"), head: e.slice(0, 60) });
}
console.log(JSON.stringify(out, null, 1));
