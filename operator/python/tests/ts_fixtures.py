"""Expected values computed by the TypeScript SDK itself, hard-coded so that the Python tests need
no Node. Regenerate with tests/gen_ts_fixtures.mjs, which imports operator/sandbox/keys.ts and
protocol.ts under Node 24 (it runs .ts directly) and prints the values as JSON:

    nice -n 19 node_modules/node/bin/node operator/python/tests/gen_ts_fixtures.mjs

Each JSON case is (JSON text given to JSON.parse and json.loads alike, canonicalJson, argsHash).
"""

# fmt: off

JSON_CASES = [
    ('{"to":"x@example.com","meta":{"b":1,"a":[{"y":2,"x":1}]}}', '{"meta":{"a":[{"x":1,"y":2}],"b":1},"to":"x@example.com"}', '5658d9257d1551b7'),
    ('{}', '{}', '44136fa355b3678a'),
    ('[]', '[]', '4f53cda18c2baa0c'),
    ('null', 'null', '74234e98afe7498f'),
    ('"text"', '"text"', '1e1d0f251d3a76fa'),
    ('{"n":1}', '{"n":1}', '2bfd14f43d17fc7c'),
    ('{"n":"1"}', '{"n":"1"}', '1a2613ec93fa82b8'),
    ('[1,2]', '[1,2]', '49a64717d5d4cb19'),
    ('[2,1]', '[2,1]', 'af1a1fc110b6094c'),
    ('true', 'true', 'b5bea41b6c623f7c'),
    ('0', '0', '5feceb66ffc86f38'),
    ('[0,-0,1.0,-1.5,0.1,1e21,1e20,123456789012345678901234,1e-7,1.5e-7,0.000001,1e300,5e-324,12345678901234567890,9007199254740993,3.14159,100,2.5e25,-1e-10,0.3,1.7976931348623157e308,2e-6,123e-20,4.35,1e16,123456.789]', '[0,0,1,-1.5,0.1,1e+21,100000000000000000000,1.2345678901234569e+23,1e-7,1.5e-7,0.000001,1e+300,5e-324,12345678901234567000,9007199254740992,3.14159,100,2.5e+25,-1e-10,0.3,1.7976931348623157e+308,0.000002,1.23e-18,4.35,10000000000000000,123456.789]', '92579764d531b8e9'),
    ('{"b":1,"10":2,"9":3,"a":0,"01":4,"4294967294":5,"4294967295":6,"-1":7,"1.5":8,"":9,"A":10}', '{"9":3,"10":2,"4294967294":5,"":9,"-1":7,"01":4,"1.5":8,"4294967295":6,"A":10,"a":0,"b":1}', '3364015f05b3caa1'),
    ('{"é":"ü","\\uffff":1,"😀":2,"z":"\\u0000\\u001f\\u007f\\u2028\\"\\\\\\/\\b\\f\\n\\r\\t","lone":"\\ud800x\\udc00","pair":"\\ud83d\\ude00"}', '{"lone":"\\ud800x\\udc00","pair":"😀","z":"\\u0000\\u001f\x7f\u2028\\"\\\\/\\b\\f\\n\\r\\t","é":"ü","😀":2,"\uffff":1}', '0e936044379b72e6'),
    ('{"a":{"c":[{"e":null,"d":true}],"b":false}}', '{"a":{"b":false,"c":[{"d":true,"e":null}]}}', '71faff43311031b3'),
    ('{"query":"SELECT * FROM t WHERE x = \'y\'","limit":10,"filters":[{"field":"ts","op":">=","value":"2026-01-01T00:00:00Z"}]}', '{"filters":[{"field":"ts","op":">=","value":"2026-01-01T00:00:00Z"}],"limit":10,"query":"SELECT * FROM t WHERE x = \'y\'"}', '89fbfe18249fecb5'),
]

# canonicalJson([NaN, Infinity, -Infinity]), of { at: new Date("2026-01-01T00:00:00.123Z") }, of undefined
NON_FINITE = ('[null,null,null]', 'fe44a8cccd89edae')
DATE = ('{"at":"2026-01-01T00:00:00.123Z"}', 'c7832e94821074be')
UNDEFINED = ('null', '74234e98afe7498f')

# idempotencyKey({ runUid, step, index, name, argsHash }); args is what argsHash was computed of
KEY_CASES = [
    ('uid-1', 2, 0, 'send_email', {"to": "a"}, '6aaffc65ba791941', '71b15a93afa64a449d787ef346fa7bb651351ac00a10651ee9c98dbff3435049'),
    ('uid-r', 1, 0, 't', {}, '44136fa355b3678a', '482005770196b2ca38fdda8fe436e8d55f428358f7436f494aab27c368836026'),
    ('3f1c9a2e-7b4d-4e8a-9c0f-1a2b3c4d5e6f', 7, 3, 'charge_card', {"cents": 1299, "currency": "EUR", "customer": {"id": "c-42", "tags": ["vip"]}}, '8f688d7d2a41b5e7', '7c51e8ac3a82cc094deb316f6f07f865271b11d18691989a45bd21c51cbf1d88'),
    ('uid-ü', 1, 12, 'wörk', {"😀": 1}, '763606c9e0046348', '103a398836b2c13d24124632ab828331ef50611420e2c3031423205b6135eb87'),
    ('uid-r', 1, 0, 'search', {"q": "x"}, 'a69fbbcf7209c6f6', '022f77c7ed77e10a74b9adf75a567b4690953f9ae7a31282d9f0db9dbec5464e'),
    ('uid-r', 1, 1, 'search', {"q": "x"}, 'a69fbbcf7209c6f6', '92e6629d47be0ea9921c530793384725db700d884ef78cc179377a4aa69edfc8'),
    ('uid-r', 2, 0, 'search', {"q": "x"}, 'a69fbbcf7209c6f6', '50f4613fc548b4ad01f950df9ece7ebd09862d92143858426da048be5089dbd4'),
]

# encodeResult(value): (value, length of the text in UTF-16 units, sha256 of the text)
RESULT_CASES = [
    ({"answer": 42}, 13, 'ecf59a2696ca44a417e20e2a7eabb1b26e82c779f8546bea354a2cc80e8e1eed'),
    ("x" * 9000, 8192, '9fcd7933d4ce23f2643228b792b9d587fd778f1cc875d67717eedb78deffa84e'),
    ({"text": "é\n" * 5000}, 8191, 'a0ebcb7e8c37cb613e6ad77898435a82209fbddcd9c5aca686b22725182f84fb'),
    ({"text": "😀" * 5000}, 8188, 'da94e4203f4f479343cc4869893729cf287e4e4f8ac0424d8540f24ee3650c0e'),
    ([1.0, 1e21, None], 14, '2edd8fdeadd827df9c94f328b3b0e3d84031a83f32086739024a52e90bdb996a'),
]
# fmt: on
