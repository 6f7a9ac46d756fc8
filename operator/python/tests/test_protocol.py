"""The pure parts of the protocol, and the names and codes shared with the TypeScript SDK."""

from __future__ import annotations

import email.utils
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
from agent_watchdog.errors import parse_retry_after
from agent_watchdog.protocol import (
    NOT_CURRENT_SANDBOX,
    approval_fingerprint,
    approval_outcome,
    duration_nanos,
    effective_heartbeat_timeout_ms,
    fence_reason,
    heartbeat_decision,
    heartbeat_interval_ms,
    new_nudge,
    replay_decision,
    unwrap_checkpoint,
    upsert_call,
    wrap_approval_checkpoint,
)

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

    def test_exit_codes_match_errors_ts(self) -> None:
        source = ts_source("operator/sandbox/errors.ts")
        if source is None:
            self.skipTest("operator/sandbox/errors.ts is not beside this package")
        block = source[source.index("export const EXIT_CODES") :]
        block = block[: block.index("} as const")]
        ts = {m.group(1): int(m.group(2)) for m in re.finditer(r"^\s+(\w+): (\d+),", block, re.M)}
        ts["unconfirmedSideEffect"] = int(ExitCode.UNCONFIRMED_SIDE_EFFECT)  # defined in annotations.ts
        expected = {"completed": 0, "failed": 1, "config": 2, "unconfirmedSideEffect": 3, "fenced": 4, "approvalDenied": 5}
        self.assertEqual(ts, expected)
        py = {"completed": "completed", "failed": "failed", "config": "config", "unconfirmedSideEffect": "unconfirmed_side_effect", "fenced": "fenced", "approvalDenied": "approval_denied"}
        self.assertEqual({k: int(EXIT_CODES[v]) for k, v in py.items()}, expected)

    def test_exit_code_for(self) -> None:
        self.assertEqual(exit_code_for(UnconfirmedSideEffectError({"name": "t", "id": "a1-1"})), 3)
        self.assertEqual(exit_code_for(FencedError("x")), 4)
        self.assertEqual(exit_code_for(ApprovalDeniedError("Rejected")), 5)
        self.assertEqual(exit_code_for(SandboxConfigError("x")), 2)
        self.assertEqual(exit_code_for(RuntimeError("x")), 1)


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

    def test_approval_requests(self) -> None:
        earlier = {"state": "Approved", "requestedAt": "2026-11-30T11:00:00Z", "decidedAt": "2026-11-30T11:00:10Z", "answer": "yes"}
        request = {"question": "Q?", "askedAt": "2026-11-30T12:00:00.000Z", "supersedes": approval_fingerprint(earlier)}
        self.assertEqual(request["supersedes"], "2026-11-30T11:00:00Z|2026-11-30T11:00:10Z|Approved")
        self.assertEqual(approval_outcome(earlier, request).state, "Pending")  # an earlier question's answer
        later = {**earlier, "requestedAt": "2026-11-30T12:00:01Z", "answer": "go"}
        self.assertEqual(approval_outcome(later, request).answer, "go")
        self.assertEqual(approval_outcome({"state": "Rejected", "requestedAt": "x", "reason": "no"}, {}).reason, "no")
        self.assertEqual(approval_outcome({"state": "TimedOut", "requestedAt": "x"}, {}).state, "TimedOut")
        wrapped = wrap_approval_checkpoint(2, {"v": 2}, request)
        self.assertEqual(wrapped["data"]["watchdog.dev/approval-request"]["question"], "Q?")
        inner, found = unwrap_checkpoint(wrapped)
        self.assertEqual(inner, {"step": 2, "data": {"v": 2}})
        self.assertEqual(found, request)
        self.assertEqual(unwrap_checkpoint({"step": 1, "data": {"x": 1}}), ({"step": 1, "data": {"x": 1}}, None))


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
