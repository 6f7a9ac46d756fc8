"""The idempotency keys and argument hashes are byte-identical to the TypeScript SDK's: the
expected values in ts_fixtures.py were computed by operator/sandbox/keys.ts itself."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
import unittest

from agent_watchdog import ARGS_HASH_LENGTH, args_hash, canonical_json, idempotency_key
from agent_watchdog.protocol import encode_result

from ts_fixtures import DATE, JSON_CASES, KEY_CASES, NON_FINITE, RESULT_CASES, UNDEFINED


class CanonicalJsonTest(unittest.TestCase):
    def test_same_canonical_json_and_hash_as_typescript(self) -> None:
        for text, canonical, hashed in JSON_CASES:
            with self.subTest(text=text[:60]):
                value = json.loads(text)
                self.assertEqual(canonical_json(value), canonical)
                self.assertEqual(args_hash(value), hashed)

    def test_values_javascript_reduces(self) -> None:
        self.assertEqual((canonical_json([math.nan, math.inf, -math.inf]), args_hash([math.nan, math.inf, -math.inf])), NON_FINITE)
        at = {"at": dt.datetime(2026, 1, 1, 0, 0, 0, 123000, tzinfo=dt.timezone.utc)}
        self.assertEqual((canonical_json(at), args_hash(at)), DATE)
        self.assertEqual((canonical_json(None), args_hash(None)), UNDEFINED)

    def test_key_order_does_not_matter_and_values_do(self) -> None:
        a = {"to": "x@example.com", "meta": {"b": 1, "a": [{"y": 2, "x": 1}]}}
        b = {"meta": {"a": [{"x": 1, "y": 2}], "b": 1}, "to": "x@example.com"}
        self.assertEqual(args_hash(a), args_hash(b))
        self.assertNotEqual(args_hash([1, 2]), args_hash([2, 1]))
        self.assertNotEqual(args_hash({"n": 1}), args_hash({"n": "1"}))
        self.assertEqual(args_hash({"n": 1}), args_hash({"n": 1.0}))  # one number in JavaScript
        self.assertEqual(args_hash((1, 2)), args_hash([1, 2]))  # a tuple is an array
        self.assertRegex(args_hash({"q": "x"}), f"^[0-9a-f]{{{ARGS_HASH_LENGTH}}}$")

    def test_refuses_what_has_no_json(self) -> None:
        with self.assertRaises(TypeError):
            canonical_json({"s": {1, 2}})


class IdempotencyKeyTest(unittest.TestCase):
    def test_same_keys_as_typescript(self) -> None:
        for run_uid, step, index, name, args, hashed, key in KEY_CASES:
            with self.subTest(name=name, step=step, index=index):
                self.assertEqual(args_hash(args), hashed)
                self.assertEqual(idempotency_key(run_uid, step, index, name, hashed), key)

    def test_is_the_sha256_of_its_parts(self) -> None:
        hashed = args_hash({"to": "a"})
        expected = hashlib.sha256(f"uid-1/2/0/send_email/{hashed}".encode()).hexdigest()
        self.assertEqual(idempotency_key("uid-1", 2, 0, "send_email", hashed), expected)
        variants = {
            idempotency_key("uid-1", 2, 0, "send_email", hashed),
            idempotency_key("uid-2", 2, 0, "send_email", hashed),
            idempotency_key("uid-1", 3, 0, "send_email", hashed),
            idempotency_key("uid-1", 2, 1, "send_email", hashed),
            idempotency_key("uid-1", 2, 0, "send_sms", hashed),
            idempotency_key("uid-1", 2, 0, "send_email", args_hash({"to": "b"})),
        }
        self.assertEqual(len(variants), 6)


class EncodeResultTest(unittest.TestCase):
    def test_same_saved_results_as_typescript(self) -> None:
        for value, length, digest in RESULT_CASES:
            with self.subTest(value=str(value)[:30]):
                text = encode_result(value)
                assert text is not None
                self.assertEqual(len(text.encode("utf-16-le", "surrogatepass")) // 2, length)
                self.assertEqual(hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest(), digest)
                self.assertLessEqual(length, 8192)
                json.loads(text)

    def test_nothing_for_none(self) -> None:
        self.assertIsNone(encode_result(None))


if __name__ == "__main__":
    unittest.main()
