"""The pure parts of the protocol, and the names and codes shared with the TypeScript SDK."""

from __future__ import annotations

import email.utils
import math
import os
import re
import unittest
import urllib.error

from agent_watchdog import (
    EXIT_CODES,
    SANDBOX_ENV,
    SANDBOX_FIELD_MANAGER,
    ApprovalDeniedError,
    ExitCode,
    FencedError,
    SandboxConfigError,
    ToolError,
    UnconfirmedSideEffectError,
    describe_failure,
    exit_code_for,
    identity_from_env,
)
from agent_watchdog.api_client import ApiError, is_transient, retry_after_s
from agent_watchdog.errors import CheckpointTooLargeError, is_rate_limit_error, parse_retry_after
from agent_watchdog.protocol import (
    MAX_CHECKPOINT_BYTES,
    MAX_HEARTBEAT_INTERVAL_MS,
    MAX_SANDBOX_STATUS_BYTES,
    NOT_CURRENT_SANDBOX,
    approval_outcome,
    checkpoint_refusal,
    duration_nanos,
    effective_heartbeat_timeout_ms,
    fence_reason,
    heartbeat_decision,
    heartbeat_interval_ms,
    json_bytes,
    new_nudge,
    newest_call_rate_limited,
    parse_duration_ms,
    opened_request_id,
    replay_decision,
    unwrap_checkpoint,
    upsert_call,
    wrap_approval_checkpoint,
)
from agent_watchdog.timers import MAX_WAIT_S, wait_s

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


def ts_source(path: str) -> str | None:
    try:
        with open(os.path.join(REPO, path), encoding="utf-8") as f:
            return f.read()
    except OSError:
        return None


class SharedNamesTest(unittest.TestCase):
    """The contract's names, read from the TypeScript sources where they are defined."""

    def test_env_field_manager_and_exit_codes_match_annotations_ts(self) -> None:
        source = ts_source("operator/api/annotations.ts")
        if source is None:
            self.skipTest("operator/api/annotations.ts is not beside this package")
        self.assertIn(f'SANDBOX_FIELD_MANAGER = "{SANDBOX_FIELD_MANAGER}"', source)
        self.assertIn(f'NOT_CURRENT_SANDBOX = "{NOT_CURRENT_SANDBOX}"', source)
        for key, ts_key in (("run_name", "runName"), ("run_namespace", "runNamespace"), ("attempt", "attempt")):
            self.assertIn(f'{ts_key}: "{SANDBOX_ENV[key]}"', source)
        self.assertRegex(source, rf"unconfirmedSideEffect: {int(ExitCode.UNCONFIRMED_SIDE_EFFECT)},")
        self.assertRegex(source, rf"rateLimited: {int(ExitCode.RATE_LIMITED)},")

    def test_exit_codes_match_errors_ts(self) -> None:
        source = ts_source("operator/sandbox/errors.ts")
        if source is None:
            self.skipTest("operator/sandbox/errors.ts is not beside this package")
        block = source[source.index("export const EXIT_CODES") :]
        block = block[: block.index("} as const")]
        ts = {m.group(1): int(m.group(2)) for m in re.finditer(r"^\s+(\w+): (\d+),", block, re.M)}
        # Defined in annotations.ts (checked above), taken from there by name.
        for name, code in (("unconfirmedSideEffect", ExitCode.UNCONFIRMED_SIDE_EFFECT), ("rateLimited", ExitCode.RATE_LIMITED)):
            self.assertRegex(block, re.compile(rf"^\s+{name}: SANDBOX_EXIT_CODES\.{name},", re.M))
            ts[name] = int(code)
        expected = {"completed": 0, "failed": 1, "config": 2, "unconfirmedSideEffect": 3, "fenced": 4, "approvalDenied": 5, "rateLimited": 6}
        self.assertEqual(ts, expected)
        py = {
            "completed": "completed",
            "failed": "failed",
            "config": "config",
            "unconfirmedSideEffect": "unconfirmed_side_effect",
            "fenced": "fenced",
            "approvalDenied": "approval_denied",
            "rateLimited": "rate_limited",
        }
        self.assertEqual({k: int(EXIT_CODES[v]) for k, v in py.items()}, expected)

    def test_size_limits_match_limits_ts(self) -> None:
        source = ts_source("operator/api/limits.ts")
        if source is None:
            self.skipTest("operator/api/limits.ts is not beside this package")

        def ts_value(name: str) -> int:
            m = re.search(rf"export const {name} = ([\d_ *]+);", source)
            assert m is not None, f"{name} is not a product of numbers in limits.ts"
            return math.prod(int(factor.replace("_", "")) for factor in m.group(1).split("*"))

        self.assertEqual((ts_value("MAX_CHECKPOINT_BYTES"), ts_value("MAX_SANDBOX_STATUS_BYTES")), (MAX_CHECKPOINT_BYTES, MAX_SANDBOX_STATUS_BYTES))
        self.assertIn("utf8.encode(JSON.stringify(value)).length", source)  # what json_bytes counts too

    def test_exit_code_for(self) -> None:
        self.assertEqual(exit_code_for(UnconfirmedSideEffectError({"name": "t", "id": "a1-1"})), 3)
        self.assertEqual(exit_code_for(FencedError("x")), 4)
        self.assertEqual(exit_code_for(ApprovalDeniedError("Rejected")), 5)
        self.assertEqual(exit_code_for(SandboxConfigError("x")), 2)
        self.assertEqual(exit_code_for(RuntimeError("x")), 1)
        self.assertEqual(exit_code_for(ToolError("429 Too Many Requests", http_status=429)), 6)

    def test_a_rate_limit_is_a_tool_error_with_429_raised_or_wrapped(self) -> None:
        limited = ToolError("slow down", http_status=429)
        try:
            try:
                raise limited
            except ToolError as err:
                raise RuntimeError("the model gave up") from err
        except RuntimeError as err:
            wrapped = err
        self.assertTrue(is_rate_limit_error(wrapped))
        try:
            try:
                raise limited
            except ToolError:
                raise RuntimeError("while handling it")  # noqa: B904 - implicit chaining on purpose
        except RuntimeError as err:
            implicit = err
        self.assertTrue(is_rate_limit_error(implicit))
        self.assertFalse(is_rate_limit_error(ToolError("down", http_status=503)))
        self.assertFalse(is_rate_limit_error(RuntimeError("x")))
        cycle = RuntimeError("a")
        cycle.__context__ = cycle
        self.assertFalse(is_rate_limit_error(cycle))


class IdentityTest(unittest.TestCase):
    def test_from_env(self) -> None:
        identity = identity_from_env({"WATCHDOG_RUN_NAME": "r", "WATCHDOG_RUN_NAMESPACE": "ns", "WATCHDOG_ATTEMPT": "2"})
        self.assertEqual((identity.run_name, identity.namespace, identity.attempt), ("r", "ns", 2))

    def test_missing_or_bad(self) -> None:
        with self.assertRaisesRegex(SandboxConfigError, "WATCHDOG_RUN_NAME, WATCHDOG_ATTEMPT not set"):
            identity_from_env({"WATCHDOG_RUN_NAMESPACE": "ns"})
        for bad in ("0", "-1", "1.5", "x"):
            with self.assertRaises(SandboxConfigError):
                identity_from_env({"WATCHDOG_RUN_NAME": "r", "WATCHDOG_RUN_NAMESPACE": "ns", "WATCHDOG_ATTEMPT": bad})


class DurationAndHeartbeatTest(unittest.TestCase):
    def test_go_durations(self) -> None:
        self.assertEqual(duration_nanos("30s"), 30_000_000_000)
        self.assertEqual(duration_nanos("1h30m"), 5_400_000_000_000)
        self.assertEqual(duration_nanos("1.5s"), 1_500_000_000)
        self.assertEqual(duration_nanos("0.3h"), 1_080_000_000_000)
        self.assertEqual(duration_nanos("0.5ns"), 0)
        self.assertIsNone(duration_nanos("5"))
        self.assertIsNone(duration_nanos("-5s"))
        self.assertIsNone(duration_nanos("9999999999999h"))

    def test_effective_timeout(self) -> None:
        self.assertEqual(effective_heartbeat_timeout_ms({}), 300_000)
        self.assertEqual(effective_heartbeat_timeout_ms({"spec": {"watchdog": {"heartbeatTimeout": "1m"}}}), 60_000)
        run = {"spec": {"watchdog": {"heartbeatTimeout": "1m"}}, "status": {"watchdog": {"heartbeatTimeout": "40s"}}}
        self.assertEqual(effective_heartbeat_timeout_ms(run), 40_000)
        self.assertEqual(effective_heartbeat_timeout_ms({"status": {"watchdog": {"heartbeatTimeout": "bogus"}}}), 300_000)
        self.assertEqual(heartbeat_interval_ms(300_000), 75_000)
        self.assertEqual(heartbeat_interval_ms(200), 100)

    def test_heartbeats_at_least_as_often_as_with_the_default_timeout(self) -> None:
        self.assertEqual(MAX_HEARTBEAT_INTERVAL_MS, 75_000)
        self.assertEqual(heartbeat_interval_ms(600_000), 75_000)
        self.assertEqual(heartbeat_interval_ms(parse_duration_ms("100000h")), 75_000)
        self.assertEqual(heartbeat_interval_ms(float("inf")), 75_000)
        self.assertEqual(heartbeat_interval_ms(float("nan")), 75_000)

    def test_waits_a_thread_can_hold(self) -> None:
        self.assertEqual(MAX_WAIT_S, 2_147_483.647)
        self.assertEqual(wait_s(1e12), MAX_WAIT_S)
        self.assertEqual(wait_s(float("inf")), MAX_WAIT_S)
        self.assertEqual((wait_s(1.5), wait_s(-1), wait_s(float("nan")), wait_s(None)), (1.5, 0.0, 0.0, None))

    def test_decision(self) -> None:
        base = dict(last_write_at=1000, interval_ms=1000, last_progress_at=1500, progress_timeout_ms=4000, waiting_for_input=False)
        d = heartbeat_decision(now=1900, **base)
        self.assertEqual((d.write, d.wedged, d.next_check_at), (False, False, 2000))
        d = heartbeat_decision(now=2000, **base)
        self.assertEqual((d.write, d.wedged, d.next_check_at), (True, False, 3000))
        d = heartbeat_decision(now=6000, **base)
        self.assertEqual((d.write, d.wedged), (False, True))
        d = heartbeat_decision(now=6000, **{**base, "waiting_for_input": True})
        self.assertEqual((d.write, d.wedged), (True, False))


class ReplayTest(unittest.TestCase):
    def call(self, state: str, key: str = "k", idempotent: bool | None = None, id: str = "a1-1") -> dict:
        c = {"id": id, "name": "t", "argsHash": "h", "idempotencyKey": key, "state": state, "attempt": 1}
        if idempotent is not None:
            c["idempotent"] = idempotent
        return c

    def test_decisions(self) -> None:
        self.assertEqual(replay_decision([], "k", True, None).kind, "run")
        self.assertEqual(replay_decision([self.call("Succeeded")], "k", False, None).kind, "saved")
        self.assertEqual(replay_decision([self.call("Failed")], "k", False, None).kind, "run")
        self.assertEqual(replay_decision([self.call("Started")], "k", True, None).kind, "rerun")
        self.assertEqual(replay_decision([self.call("Started")], "k", False, None).kind, "refuse")
        # what the tool promised when it was started counts
        self.assertEqual(replay_decision([self.call("Started", idempotent=False)], "k", True, None).kind, "refuse")
        self.assertEqual(replay_decision([self.call("Started", idempotent=True)], "k", False, None).kind, "rerun")
        # a person resumed the run after the record: reported, not refused, never rerun
        calls = [self.call("Started"), self.call("Failed", key="other", id="a1-2")]
        self.assertEqual(replay_decision(calls, "k", False, "a1-2").kind, "unconfirmed")
        self.assertEqual(replay_decision(calls, "k", False, "a1-9").kind, "refuse")

    def test_upsert_keeps_the_newest(self) -> None:
        calls: list = []
        for i in range(5):
            calls = upsert_call(calls, self.call("Started", id=f"a1-{i}"), 3)
        self.assertEqual([c["id"] for c in calls], ["a1-2", "a1-3", "a1-4"])
        calls = upsert_call(calls, self.call("Succeeded", id="a1-3"), 3)
        self.assertEqual([c["state"] for c in calls], ["Started", "Succeeded", "Started"])


class FencingNudgesApprovalsTest(unittest.TestCase):
    def test_fence_reason(self) -> None:
        self.assertEqual(fence_reason({"attempt": 2}, 1), "attempt 1 was superseded by attempt 2")
        self.assertIsNone(fence_reason({"attempt": 0, "phase": "Queued"}, 1))
        self.assertIsNone(fence_reason({"attempt": 1, "phase": "Planning"}, 1))
        self.assertEqual(fence_reason({"attempt": 1, "phase": "Suspended"}, 1), "the run is Suspended")
        self.assertIsNone(fence_reason({"attempt": 0, "phase": "Failed"}, 1))

    def test_new_nudge(self) -> None:
        stall = {"state": "Fired", "nudges": 2, "lastNudge": {"time": "2026-11-30T12:00:01Z", "message": "wake up"}}
        self.assertEqual(new_nudge(stall, None).message, "wake up")
        self.assertEqual(new_nudge(stall, None).count, 2)
        self.assertIsNone(new_nudge(stall, "2026-11-30T12:00:01Z"))
        self.assertIsNone(new_nudge(stall, "2026-11-30T12:00:01.500Z"))
        self.assertIsNotNone(new_nudge(stall, "2026-11-30T12:00:00.999Z"))

    def test_approval_requests_in_the_checkpoint(self) -> None:
        request = {"question": "Q?", "askedAt": "2026-11-30T12:00:00.000Z", "key": "k1"}
        wrapped = wrap_approval_checkpoint(2, {"v": 2}, request)
        self.assertEqual(wrapped["data"]["watchdog.dev/approval-request"], request)
        inner, found = unwrap_checkpoint(wrapped)
        self.assertEqual(inner, {"step": 2, "data": {"v": 2}})
        self.assertEqual(found, request)
        self.assertEqual(unwrap_checkpoint({"step": 1, "data": {"x": 1}}), ({"step": 1, "data": {"x": 1}}, None))
        # someone else's request, read field by field: no key that is not one, nothing of older SDKs
        asked = lambda fields: unwrap_checkpoint({"step": 1, "data": {"watchdog.dev/approval-request": fields}})[1]  # noqa: E731
        self.assertEqual(asked({"question": "Q?", "askedAt": "t", "supersedes": "old"}), {"question": "Q?", "askedAt": "t"})
        self.assertEqual(asked({"question": "Q?", "key": 42}), {"question": "Q?", "askedAt": ""})
        self.assertEqual(asked({"question": "Q?", "key": "k" * 65}), {"question": "Q?", "askedAt": ""})
        self.assertIsNone(asked({"question": 7}))

    def test_approval_outcomes_by_key_and_id(self) -> None:
        def request(**over: object) -> dict:
            return {"id": "req-1", "state": "Pending", "requestKey": "k1", "requestedAt": "2026-11-30T12:00:00Z", **over}

        self.assertEqual(opened_request_id(request(), "k1"), "req-1")
        self.assertIsNone(opened_request_id(request(requestKey="k2"), "k1"))
        self.assertIsNone(opened_request_id(request(state="Approved"), "k1"))
        self.assertIsNone(opened_request_id(request(), None))
        self.assertEqual(approval_outcome(None, "k1").state, "Pending")
        self.assertEqual(approval_outcome(request(), "k1", "req-1").state, "Pending")
        self.assertEqual(approval_outcome(request(state="Approved", answer="ship it"), "k1", "req-1").answer, "ship it")
        self.assertEqual(approval_outcome(request(state="Rejected", reason="no"), "k1", "req-1").reason, "no")
        self.assertEqual(approval_outcome(request(state="TimedOut"), "k1", "req-1").state, "TimedOut")
        self.assertEqual(approval_outcome(request(state="Withdrawn"), "k1", "req-1").state, "Withdrawn")
        # decided before the sandbox saw it open: its key says whose it is
        self.assertEqual(approval_outcome(request(state="Approved", answer="yes"), "k1").answer, "yes")
        # never another request's decision, asked however close in time
        self.assertEqual(approval_outcome(request(id="req-0", requestKey="k0", state="Approved"), "k1").state, "Pending")
        self.assertEqual(approval_outcome(request(id="req-2", state="Approved"), "k1", "req-1").state, "Pending")
        self.assertEqual(approval_outcome(request(requestKey=None, state="Approved"), None).state, "Pending")
        self.assertEqual(approval_outcome(request(state="Dancing"), "k1").state, "Pending")


class SizesAndRateLimitsTest(unittest.TestCase):
    HEARTBEAT = {"time": "2026-11-30T12:00:00.000Z", "attempt": 1, "state": "Planning"}

    def sized(self, size: int, char: str = "x") -> dict:
        """A checkpoint whose JSON is exactly ``size`` bytes: {"step":1,"data":"xxx…"}."""
        return {"step": 1, "data": char * ((size - len('{"step":1,"data":""}')) // len(char.encode()))}

    def test_json_bytes_are_utf8_bytes_of_javascripts_json(self) -> None:
        self.assertEqual(json_bytes({"a": "é😀", "n": 1.0}), len('{"a":"é😀","n":1}'.encode()))
        self.assertEqual(json_bytes({"lone": "\ud800"}), len('{"lone":"\\ud800"}'))

    def test_a_checkpoint_up_to_the_limit_fits_and_one_byte_more_is_refused(self) -> None:
        self.assertIsNone(checkpoint_refusal({"heartbeat": self.HEARTBEAT, "checkpoint": self.sized(MAX_CHECKPOINT_BYTES)}))
        refusal = checkpoint_refusal({"heartbeat": self.HEARTBEAT, "checkpoint": self.sized(MAX_CHECKPOINT_BYTES + 1)})
        assert refusal is not None
        self.assertIsInstance(refusal, CheckpointTooLargeError)
        self.assertEqual((refusal.what, refusal.step, refusal.size, refusal.limit), ("checkpoint", 1, MAX_CHECKPOINT_BYTES + 1, MAX_CHECKPOINT_BYTES))
        self.assertEqual(str(refusal), f"the checkpoint of step 1 is {MAX_CHECKPOINT_BYTES + 1} bytes as JSON, over the limit of {MAX_CHECKPOINT_BYTES} bytes; nothing was written")
        euros = self.sized(MAX_CHECKPOINT_BYTES + 1, "€")
        self.assertEqual(getattr(checkpoint_refusal({"heartbeat": self.HEARTBEAT, "checkpoint": euros}), "size", None), MAX_CHECKPOINT_BYTES + 1)

    def test_the_sandboxs_whole_part_of_status_is_bounded_too(self) -> None:
        calls = [{"id": f"a1-{i}", "name": "t", "argsHash": "h", "state": "Succeeded", "attempt": 1, "result": "r" * 8000} for i in range(50)]
        checkpoint = self.sized(200 * 1024)
        self.assertIsNone(checkpoint_refusal({"heartbeat": self.HEARTBEAT, "checkpoint": checkpoint}))
        part = {"heartbeat": self.HEARTBEAT, "toolCalls": calls, "checkpoint": checkpoint}
        refusal = checkpoint_refusal(part)
        assert refusal is not None
        self.assertEqual((refusal.what, refusal.size, refusal.limit), ("sandbox status", json_bytes(part), MAX_SANDBOX_STATUS_BYTES))

    def test_the_newest_call_of_this_attempt_says_whether_a_give_up_was_a_rate_limit(self) -> None:
        def failed(id: str, attempt: int, status: int | None) -> dict:
            return {"id": id, "attempt": attempt, "state": "Failed", "error": {"message": "x", **({} if status is None else {"httpStatus": status})}}

        ok = {"id": "a2-2", "attempt": 2, "state": "Succeeded"}
        self.assertTrue(newest_call_rate_limited([ok, failed("a2-3", 2, 429)], 2))
        self.assertFalse(newest_call_rate_limited([failed("a2-1", 2, 429), ok], 2))
        self.assertFalse(newest_call_rate_limited([failed("a1-1", 1, 429)], 2))
        self.assertTrue(newest_call_rate_limited([failed("a2-1", 2, 429), failed("a1-9", 1, 500)], 2))
        self.assertFalse(newest_call_rate_limited([failed("a2-1", 2, 503), failed("a2-2", 2, None)], 2))
        self.assertFalse(newest_call_rate_limited([], 1))

    def test_status_writes_the_server_refuses_for_good_are_not_retried(self) -> None:
        def err(code: int, message: str = "", retry_after: str | None = None, body: dict | None = None) -> ApiError:
            return ApiError("PATCH", "/x", code, body or {"message": message}, retry_after)

        for code in (401, 408, 409, 429, 500, 503):
            self.assertTrue(is_transient(err(code)), code)
        for code in (400, 403, 404, 413, 422):
            self.assertFalse(is_transient(err(code)), code)
        self.assertTrue(is_transient(ConnectionResetError()))
        self.assertFalse(is_transient(err(500, "etcdserver: request is too large")))
        self.assertTrue(is_transient(err(500, "etcdserver: leader changed")))
        self.assertEqual(retry_after_s(err(429, retry_after="3")), 3.0)
        self.assertEqual(retry_after_s(err(429, body={"details": {"retryAfterSeconds": 2}})), 2.0)
        self.assertIsNone(retry_after_s(err(429, body={"details": {"retryAfterSeconds": "soon"}})))
        self.assertIsNone(retry_after_s(ConnectionResetError()))


class DescribeFailureTest(unittest.TestCase):
    def test_tool_error(self) -> None:
        f = describe_failure(ToolError("Too Many Requests", http_status=429, retry_after_seconds=30))
        self.assertEqual((f.kind, f.message, f.http_status, f.retry_after_seconds), ("error", "Too Many Requests", 429, 30))

    def test_urllib_http_error(self) -> None:
        headers = email.message_from_string("Retry-After: 12\r\n\r\n")
        err = urllib.error.HTTPError("http://x", 503, "Service Unavailable", headers, None)  # type: ignore[arg-type]
        f = describe_failure(err)
        self.assertEqual((f.http_status, f.retry_after_seconds), (503, 12))

    def test_response_shaped_error(self) -> None:
        class Response:
            status_code = 429
            headers = {"Retry-After": email.utils.formatdate(1_000_030, usegmt=True)}

        class HTTPError(Exception):
            response = Response()

        f = describe_failure(HTTPError("rate limited"), now_s=1_000_000)
        self.assertEqual((f.message, f.http_status, f.retry_after_seconds), ("rate limited", 429, 30))

    def test_plain_and_long(self) -> None:
        f = describe_failure(ValueError())
        self.assertEqual(f.message, "ValueError")
        self.assertIsNone(f.http_status)
        self.assertEqual(len(describe_failure(RuntimeError("x" * 5000)).message), 4096)
        self.assertEqual(parse_retry_after("1e9"), None)
        self.assertEqual(parse_retry_after(10**9), 86_400)
        self.assertEqual(parse_retry_after("-3"), None)


if __name__ == "__main__":
    unittest.main()
