"""The Sandbox against a fake API server over real sockets: what it writes, in which order, when,
and when it stops writing. Real time, short timeouts; every timing assertion is a bound that load
can only make safer (fewer writes, longer gaps), never one that needs a fast machine."""

from __future__ import annotations

import os
import tempfile
import threading
import time
import unittest
import urllib.error
from typing import Any, Callable, Optional

from agent_watchdog import (
    ApiClient,
    ApiError,
    ApprovalDeniedError,
    CheckpointTooLargeError,
    ClusterConfig,
    ExitCode,
    FencedError,
    JsonLogger,
    Sandbox,
    SandboxIdentity,
    ToolError,
    ToolValidationError,
    UnconfirmedSideEffectError,
    args_hash,
    idempotency_key,
    run_agent,
)

from agent_watchdog.protocol import MAX_CHECKPOINT_BYTES, MAX_SANDBOX_STATUS_BYTES, json_bytes
from agent_watchdog.read_run import read_own_run
from fake_apiserver import FakeApiServer, status_body
from ts_fixtures import KEY_CASES

SILENT = JsonLogger("silent")


def heartbeat_only(patch: dict[str, Any]) -> bool:
    status = patch["status"]
    return list(status) == ["heartbeat"] and "activity" not in status["heartbeat"]


def parse_ms(text: str) -> float:
    from agent_watchdog.protocol import parse_time_ms

    value = parse_time_ms(text)
    assert value is not None
    return value


def eventually(predicate: Callable[[], bool], timeout: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


class Background:
    """Runs a blocking SDK call on a thread and keeps its result or exception."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.result: Any = None
        self.error: Optional[BaseException] = None
        self.thread = threading.Thread(target=self._run, args=(fn,), daemon=True)
        self.thread.start()

    def _run(self, fn: Callable[[], Any]) -> None:
        try:
            self.result = fn()
        except BaseException as err:  # noqa: BLE001
            self.error = err

    def join(self, timeout: float = 10.0) -> Any:
        self.thread.join(timeout)
        if self.thread.is_alive():
            raise AssertionError("the call did not return")
        if self.error is not None:
            raise self.error
        return self.result

    @property
    def done(self) -> bool:
        return not self.thread.is_alive()


class SandboxTestCase(unittest.TestCase):
    def setUp(self) -> None:
        self.sandboxes: list[Sandbox] = []

    def tearDown(self) -> None:
        for sandbox in self.sandboxes:
            sandbox.abandon()

    def fake(self, status: Optional[dict[str, Any]] = None, spec: Optional[dict[str, Any]] = None) -> FakeApiServer:
        fake = FakeApiServer(status, spec).start()
        self.addCleanup(fake.stop)
        return fake

    def client(self, fake: FakeApiServer) -> ApiClient:
        client = ApiClient(ClusterConfig(server=fake.url, source="test"))
        self.addCleanup(client.close)
        return client

    def start(self, fake: FakeApiServer, attempt: int = 1, **options: Any) -> Sandbox:
        opened = fake.watches_opened
        sandbox = Sandbox.start(
            client=self.client(fake),
            identity=SandboxIdentity("r", "ns", attempt),
            logger=SILENT,
            exit=lambda code: None,
            **options,
        )
        self.sandboxes.append(sandbox)
        fake.wait_for(lambda: fake.watches_opened > opened, what="the sandbox's watch")
        return sandbox

    def run_agent(self, fake: FakeApiServer, main: Callable[[Sandbox], Any], attempt: int = 1, **options: Any) -> tuple[int, list[int]]:
        exits: list[int] = []
        options.setdefault("termination_log_path", os.path.join(tempfile.gettempdir(), "none", "x"))
        code = run_agent(
            main,
            client=self.client(fake),
            identity=SandboxIdentity("r", "ns", attempt),
            logger=SILENT,
            exit=exits.append,
            **options,
        )
        return code, exits


class ReportingInTest(SandboxTestCase):
    def test_first_says_alive_and_planning_and_clears_an_earlier_attempts_activity(self) -> None:
        earlier = {"time": "2026-11-30T11:00:00Z", "attempt": 1, "state": "Planning", "activity": {"kind": "text", "time": "2026-11-30T11:00:00Z"}}
        fake = self.fake({"heartbeat": earlier})
        before = time.time()
        self.start(fake)
        first = fake.patches[0]
        self.assertEqual(list(first), ["status"])
        self.assertEqual(list(first["status"]), ["heartbeat"])
        beat = first["status"]["heartbeat"]
        self.assertEqual((beat["attempt"], beat["state"], beat["activity"]), (1, "Planning", None))
        self.assertGreaterEqual(parse_ms(beat["time"]), int(before * 1000) - 1)
        self.assertNotIn("activity", fake.status["heartbeat"])
        # the sandbox field manager, a merge patch, and the watch by field selector
        self.assertEqual(fake.patch_queries[0]["fieldManager"], ["agent-watchdog-sandbox"])
        self.assertEqual(fake.content_types[0], "application/merge-patch+json")
        watches = [p for p in fake.raw_paths if "watch=true" in p]
        self.assertTrue(watches)
        self.assertIn("fieldSelector=metadata.name%3Dr", watches[0])
        self.assertTrue(watches[0].startswith("/apis/watchdog.dev/v1alpha1/namespaces/ns/agentruns?"))

    def test_waits_out_an_api_server_that_cannot_be_reached_at_start_then_gives_up(self) -> None:
        fake = self.fake()
        fake.read_failures += [(503, status_body(503, "ServiceUnavailable", "etcd is down"))] * 2
        self.start(fake)
        self.assertEqual(len(fake.patches), 1)

        down = self.fake()
        down.read_failures += [(503, status_body(503, "ServiceUnavailable", "etcd is down"))] * 100
        started = time.monotonic()
        with self.assertRaises(ApiError) as caught:
            self.start(down, start_deadline=1.0)
        self.assertEqual(caught.exception.code, 503)
        self.assertLess(time.monotonic() - started, 5)
        self.assertEqual(down.patches, [])

    def test_waits_out_a_403_at_start_its_role_binding_not_yet_seen_then_gives_up(self) -> None:
        fake = self.fake()
        fake.read_failures += [(403, status_body(403, "Forbidden", "cannot get resource agentruns"))] * 2
        self.start(fake)
        self.assertEqual(len(fake.patches), 1)

        refused = self.fake()
        refused.read_failures += [(403, status_body(403, "Forbidden", "cannot get resource agentruns"))] * 100
        with self.assertRaises(ApiError) as caught:
            self.start(refused, start_deadline=1.0)
        self.assertEqual(caught.exception.code, 403)
        self.assertEqual(refused.patches, [])

    def test_says_why_it_cannot_read_its_run_while_it_waits(self) -> None:
        lines: list[tuple[str, str, dict[str, Any]]] = []

        class Recorder:
            def __getattr__(self, level: str) -> Callable[..., None]:
                return lambda msg, **fields: lines.append((level, msg, fields))

            def child(self, **_bindings: Any) -> "Recorder":
                return self

        refusal = ApiError("GET", "/run", 401, status_body(401, "Unauthorized", "Unauthorized"))

        class Refusing:
            tries = 0

            def get(self, _path: str) -> dict[str, Any]:
                Refusing.tries += 1
                if Refusing.tries <= 8:
                    raise refusal
                return {"metadata": {"name": "r"}}

        clock = [0.0]
        identity = SandboxIdentity(run_name="r", namespace="ns", attempt=1)
        read_own_run(Refusing(), identity, 60.0, Recorder(), mono=lambda: clock[0], sleep=lambda s: clock.__setitem__(0, clock[0] + s))
        waits = [fields for level, msg, fields in lines if msg == "cannot read the run yet; trying again"]
        # refusals at 0, 0.2, 0.6, 1.4, 3, 6.2, 11.2 and 16.2 s: reported at the first and 10 s on
        self.assertEqual([w["tries"] for w in waits], [1, 7])
        self.assertEqual(waits[0]["code"], 401)
        self.assertEqual([fields["tries"] for level, msg, fields in lines if msg == "read the run"], [9])

    def test_refuses_to_start_for_an_attempt_that_is_already_over(self) -> None:
        fake = self.fake({"attempt": 2})
        with self.assertRaises(FencedError):
            self.start(fake)
        self.assertEqual(fake.patches, [])
        gone = self.fake()
        gone.deleted = True
        with self.assertRaisesRegex(FencedError, "does not exist"):
            self.start(gone)


class HeartbeatTest(SandboxTestCase):
    def test_heartbeat_only_writes_at_most_once_per_timeout_over_4_while_progressing(self) -> None:
        fake = self.fake()  # heartbeatTimeout 2s: interval 0.5 s
        sandbox = self.start(fake)
        end = time.monotonic() + 2.6
        while time.monotonic() < end:
            sandbox.progress()
            time.sleep(0.02)
        beats = [p for p in fake.patches if heartbeat_only(p)]
        self.assertGreaterEqual(len(beats), 2)
        self.assertLessEqual(len(beats), 6)  # 2.6 s / 0.5 s, plus none extra
        times = [parse_ms(p["status"]["heartbeat"]["time"]) for p in fake.patches]
        for earlier, later in zip(times, times[1:]):
            self.assertGreaterEqual(later - earlier, 499)
        stats = sandbox.stats()
        self.assertEqual((stats.heartbeat_timeout_s, stats.heartbeat_interval_s), (2.0, 0.5))
        self.assertEqual(stats.writes, len(fake.patches))
        self.assertEqual(stats.heartbeat_writes, len(beats))
        for beat in beats:
            self.assertEqual(beat["status"]["heartbeat"]["attempt"], 1)

    def test_state_changes_tool_records_activity_and_checkpoints_go_out_at_once_and_carry_the_heartbeat(self) -> None:
        fake = self.fake()
        sandbox = self.start(fake)
        time.sleep(0.3)
        writes = len(fake.patches)
        sandbox.say("hello")  # returns once acknowledged: no waiting for the heartbeat interval
        self.assertEqual(len(fake.patches), writes + 1)
        said = fake.patches[-1]["status"]["heartbeat"]
        self.assertEqual((said["activity"]["kind"], said["attempt"], said["state"]), ("text", 1, "Planning"))
        said_at = fake.patch_times[-1]
        sandbox.save_checkpoint(1, {"n": 1})
        self.assertEqual(fake.patches[-1]["status"]["checkpoint"], {"step": 1, "data": {"n": 1}})
        self.assertIn("heartbeat", fake.patches[-1]["status"])
        checkpoint_at = fake.patch_times[-1]
        self.assertLess(checkpoint_at - said_at, 0.5)
        # the next heartbeat-only write is an interval after the last write, not after the first
        end = time.monotonic() + 1.5
        while time.monotonic() < end:
            sandbox.progress()
            time.sleep(0.02)
        index = next(i for i, p in enumerate(fake.patches) if heartbeat_only(p) and fake.patch_times[i] > checkpoint_at)
        self.assertGreaterEqual(fake.patch_times[index] - checkpoint_at, 0.49)

    def test_stops_when_the_agent_makes_no_progress_and_resumes_when_it_does(self) -> None:
        fake = self.fake({"watchdog": {"heartbeatTimeout": "400ms"}})  # interval 100 ms
        sandbox = self.start(fake, progress_timeout=0.5)
        eventually(lambda: sandbox._heartbeat.wedged, what="the agent counting as wedged")  # noqa: SLF001
        last = fake.status["heartbeat"]["time"]
        count = len(fake.patches)
        time.sleep(0.6)
        self.assertEqual(len(fake.patches), count)  # nothing more while wedged
        self.assertEqual(fake.status["heartbeat"]["time"], last)
        sandbox.progress()
        fake.wait_for(lambda: len(fake.patches) > count, what="heartbeats resuming")
        self.assertTrue(heartbeat_only(fake.patches[-1]))

    def test_goes_on_while_the_agent_waits_on_the_sdk_for_input(self) -> None:
        fake = self.fake({"watchdog": {"heartbeatTimeout": "400ms"}})
        sandbox = self.start(fake, progress_timeout=0.3)
        waiting = Background(lambda: sandbox.next_nudge(timeout=1.6))
        time.sleep(0.7)  # past the progress timeout
        count = len([p for p in fake.patches if heartbeat_only(p)])
        time.sleep(0.6)
        self.assertGreater(len([p for p in fake.patches if heartbeat_only(p)]), count)
        self.assertFalse(sandbox._heartbeat.wedged)  # noqa: SLF001
        with self.assertRaises(TimeoutError):
            waiting.join()

    def test_follows_a_change_of_the_heartbeat_timeout(self) -> None:
        fake = self.fake()
        sandbox = self.start(fake)
        fake.operator({"watchdog": {"heartbeatTimeout": "40s"}})
        eventually(lambda: sandbox.stats().heartbeat_interval_s == 10, what="the new interval")
        self.assertEqual(sandbox.stats().heartbeat_timeout_s, 40)

    def test_a_huge_heartbeat_timeout_neither_stops_nor_floods_the_heartbeats(self) -> None:
        fake = self.fake({"watchdog": {"heartbeatTimeout": "100000h"}})
        sandbox = self.start(fake)
        self.assertEqual((sandbox.stats().heartbeat_timeout_s, sandbox.stats().heartbeat_interval_s), (360_000_000, 75))
        # A wait past threading.TIMEOUT_MAX raises OverflowError, which would end the heartbeat thread.
        for timeout in (1e12, float("inf")):
            huge = self.start(self.fake(), heartbeat_timeout=timeout)
            time.sleep(0.2)
            self.assertTrue(huge._heartbeat._thread is not None and huge._heartbeat._thread.is_alive(), timeout)  # noqa: SLF001
            self.assertEqual(huge.stats().heartbeat_interval_s, 75)
        time.sleep(0.3)
        self.assertEqual([p for p in fake.patches if heartbeat_only(p)], [])

    def test_waits_as_long_as_asked_however_long(self) -> None:
        fake = self.fake()
        sandbox = self.start(fake)
        pending = sandbox.request_approval("Q?")
        waits = [
            Background(lambda: sandbox.next_nudge(timeout=1e12)),
            Background(lambda: sandbox.signal.wait(float("inf"))),
            Background(lambda: sandbox.wait_for_approval(pending, timeout=1e12)),
        ]
        time.sleep(0.3)
        self.assertEqual([w.done for w in waits], [False, False, False])  # no OverflowError
        fake.operator({"attempt": 2})
        with self.assertRaises(FencedError):
            waits[0].join()
        self.assertTrue(waits[1].join())
        with self.assertRaises(FencedError):
            waits[2].join()

    def test_heartbeats_by_a_new_shorter_timeout_at_once_not_after_the_old_interval(self) -> None:
        fake = self.fake({"watchdog": {"heartbeatTimeout": "10m"}})  # interval 75 s
        sandbox = self.start(fake)
        time.sleep(0.3)
        self.assertEqual([p for p in fake.patches if heartbeat_only(p)], [])
        changed = time.monotonic()
        fake.operator({"watchdog": {"heartbeatTimeout": "400ms"}})  # interval 100 ms, due since the first write
        while time.monotonic() < changed + 1.0 and not any(heartbeat_only(p) for p in fake.patches):
            sandbox.progress()
            time.sleep(0.02)
        beats = [t for p, t in zip(fake.patches, fake.patch_times) if heartbeat_only(p)]
        self.assertTrue(beats, "no heartbeat after the timeout changed")
        self.assertLess(beats[0] - changed, 0.9)

    def test_waits_out_the_retry_after_of_a_429_before_writing_again(self) -> None:
        fake = self.fake()
        sandbox = self.start(fake)
        fake.failures.append((429, status_body(429, "TooManyRequests", "too many requests"), {"Retry-After": "1"}))
        began = time.monotonic()
        sandbox.say("hello")
        self.assertGreaterEqual(time.monotonic() - began, 0.95)
        self.assertEqual(fake.status["heartbeat"]["activity"]["kind"], "text")

    def test_retries_a_failed_write_and_reports_a_refused_one(self) -> None:
        fake = self.fake()
        sandbox = self.start(fake)
        fake.failures.append((503, status_body(503, "ServiceUnavailable", "unavailable")))
        sandbox.say("hello")
        self.assertEqual(sandbox.stats().failed_writes, 1)
        self.assertEqual(fake.status["heartbeat"]["activity"]["kind"], "text")
        fake.failures.append((422, status_body(422, "Invalid", "status.heartbeat: Invalid value")))
        with self.assertRaises(ApiError) as caught:
            sandbox.say("refused")
        self.assertEqual(caught.exception.code, 422)
        sandbox.say("after")  # the next change goes out as usual
        self.assertEqual(fake.status["heartbeat"]["activity"]["kind"], "text")


class RefusedWriteTest(SandboxTestCase):
    """Writes the server refuses for good: never retried, the call fails, heartbeats go on."""

    REFUSALS = (
        (422, status_body(422, "Invalid", "status.checkpoint.data: Invalid value")),
        (500, status_body(500, "InternalError", "etcdserver: request is too large")),
    )

    def test_the_call_that_saved_the_checkpoint_fails_the_last_one_stands_and_heartbeats_go_on(self) -> None:
        for code, body in self.REFUSALS:
            with self.subTest(code=code):
                fake = self.fake({"watchdog": {"heartbeatTimeout": "400ms"}})

                def refuse(patch: dict[str, Any], refusal: tuple[int, Any] = (code, body)) -> Optional[tuple[int, Any]]:
                    return refusal if ((patch["status"].get("checkpoint") or {}).get("data") or {}).get("big") else None

                fake.refuse = refuse  # every time
                sandbox = self.start(fake)
                sandbox.save_checkpoint(1, {"small": True})
                saving = Background(lambda: sandbox.save_checkpoint(2, {"big": "x" * 1000}))
                with self.assertRaises(ApiError) as caught:
                    saving.join(timeout=3)
                self.assertEqual(caught.exception.code, code)
                self.assertIn(f"{code} {body['reason']} {body['message']}", str(caught.exception))
                self.assertEqual(sandbox.load_checkpoint(), {"step": 1, "data": {"small": True}})
                self.assertEqual(sandbox.step, 2)
                count = len(fake.patches)
                end = time.monotonic() + 0.8
                while time.monotonic() < end:
                    sandbox.progress()
                    time.sleep(0.02)
                self.assertGreaterEqual(len([p for p in fake.patches[count:] if heartbeat_only(p)]), 2)
                self.assertEqual(fake.status["checkpoint"], {"step": 1, "data": {"small": True}})

    def test_a_tool_call_whose_started_record_is_refused_fails_without_running_and_the_next_calls_are_recorded(self) -> None:
        fake = self.fake()
        sandbox = self.start(fake)
        fake.failures.append((422, status_body(422, "Invalid", "status.toolCalls[0].name: Too long")))
        ran: list[Any] = []
        with self.assertRaisesRegex(ApiError, "422 Invalid status.toolCalls"):
            sandbox.tool("x" * 300, {}, lambda a, c: ran.append(a))
        self.assertEqual(ran, [])
        outcome = sandbox.tool("lookup", {"q": 1}, lambda a, c: "found", idempotent=True)
        self.assertTrue(outcome.ok)
        # Never a Started record of a call that never ran: the watchdog would take it for one in flight.
        self.assertEqual([(c["name"], c["state"]) for c in fake.status["toolCalls"]], [("lookup", "Succeeded")])
        self.assertEqual([c["name"] for c in sandbox.calls], ["lookup"])


class CheckpointSizeTest(SandboxTestCase):
    def test_a_checkpoint_over_the_limit_is_refused_at_the_call_and_heartbeats_go_on(self) -> None:
        fake = self.fake({"watchdog": {"heartbeatTimeout": "400ms"}})
        sandbox = self.start(fake)
        sandbox.save_checkpoint(1, {"notes": ["a"]})
        count = len(fake.patches)
        data = {"notes": ["a", "x" * MAX_CHECKPOINT_BYTES]}
        with self.assertRaises(CheckpointTooLargeError) as caught:
            sandbox.save_checkpoint(2, data)
        size = json_bytes({"step": 2, "data": data})
        self.assertEqual(str(caught.exception), f"the checkpoint of step 2 is {size} bytes as JSON, over the limit of {MAX_CHECKPOINT_BYTES} bytes; nothing was written")
        self.assertEqual((caught.exception.what, caught.exception.size, caught.exception.limit), ("checkpoint", size, MAX_CHECKPOINT_BYTES))
        self.assertEqual(sandbox.load_checkpoint(), {"step": 1, "data": {"notes": ["a"]}})
        self.assertEqual(sandbox.step, 2)
        end = time.monotonic() + 0.6
        while time.monotonic() < end:
            sandbox.progress()
            time.sleep(0.02)
        later = fake.patches[count:]
        self.assertTrue(later and all(heartbeat_only(p) for p in later))

    def test_counts_utf8_bytes_not_characters(self) -> None:
        sandbox = self.start(self.fake())
        with self.assertRaises(CheckpointTooLargeError):
            sandbox.save_checkpoint(1, "€" * (MAX_CHECKPOINT_BYTES // 3 + 1))  # a third of the limit in characters

    def test_a_checkpoint_that_would_make_the_sandboxs_part_of_status_too_large_is_refused(self) -> None:
        fake = self.fake()
        sandbox = self.start(fake, max_tool_calls=40)
        for i in range(40):
            sandbox.tool("read", {"i": i}, lambda a, c: "r" * 9000, idempotent=True)  # 8 KiB each, saved
        with self.assertRaisesRegex(CheckpointTooLargeError, f"over the limit of {MAX_SANDBOX_STATUS_BYTES} bytes"):
            sandbox.save_checkpoint(1, "x" * (200 * 1024))
        self.assertNotIn("checkpoint", fake.status)
        sandbox.save_checkpoint(1, "x" * (100 * 1024))  # what fits beside them is written
        self.assertEqual(fake.status["checkpoint"]["step"], 1)

    def test_counts_the_question_wrapped_around_the_data_when_asking_for_approval(self) -> None:
        fake = self.fake({"phase": "Planning"})
        sandbox = self.start(fake)
        with self.assertRaises(CheckpointTooLargeError):
            sandbox.request_approval("Deploy?", {"step": 1, "data": "x" * (MAX_CHECKPOINT_BYTES - 100)})
        self.assertNotIn("AwaitingReply", [p["status"]["heartbeat"]["state"] for p in fake.patches])
        self.assertIsNone(sandbox.load_checkpoint())


class ToolCallTest(SandboxTestCase):
    def test_commits_started_before_the_tool_runs_then_succeeded_with_the_result(self) -> None:
        fake = self.fake()
        sandbox = self.start(fake)
        fake.hold = threading.Event()
        seen: dict[str, Any] = {}

        def search(args: dict[str, str], ctx: Any) -> dict[str, Any]:
            seen["records"] = fake.status.get("toolCalls")
            seen["key"] = ctx.idempotency_key
            return {"answer": 42}

        outcome = Background(lambda: sandbox.tool("search", {"q": "x"}, search, idempotent=True))
        fake.wait_for(lambda: sum(1 for r in fake.requests if r[0] == "PATCH") >= 2, what="the Started write")
        time.sleep(0.1)
        self.assertNotIn("records", seen)  # the Started write is not acknowledged yet: the tool waits
        fake.hold.set()
        fake.hold = None
        result = outcome.join()
        self.assertEqual(len(seen["records"]), 1)
        started = seen["records"][0]
        self.assertEqual((started["name"], started["state"], started["attempt"], started["idempotent"]), ("search", "Started", 1, True))
        self.assertEqual((result.ok, result.value, result.replayed), (True, {"answer": 42}, False))
        # the same key and hash the TypeScript SDK gives this call (run uid-r, step 1, first call)
        ts = next(c for c in KEY_CASES if c[0] == "uid-r" and c[3] == "search" and c[1] == 1 and c[2] == 0)
        self.assertEqual((started["argsHash"], started["idempotencyKey"]), (ts[5], ts[6]))
        self.assertEqual(seen["key"], ts[6])
        self.assertEqual(result.idempotency_key, ts[6])
        record = fake.status["toolCalls"][0]
        self.assertEqual((record["state"], record["result"], record["id"]), ("Succeeded", '{"answer":42}', "a1-1"))
        self.assertEqual(fake.status["heartbeat"]["state"], "Planning")
        self.assertEqual(fake.status["heartbeat"]["activity"]["kind"], "toolResult")
        self.assertIn("ExecutingTool", [p["status"]["heartbeat"]["state"] for p in fake.patches])

    def test_records_a_failure_with_http_status_and_retry_after(self) -> None:
        fake = self.fake()
        sandbox = self.start(fake)

        def llm(args: Any, ctx: Any) -> None:
            raise ToolError("Too Many Requests", http_status=429, retry_after_seconds=30)

        outcome = sandbox.tool("llm", {"p": 1}, llm)
        assert outcome.error is not None
        self.assertEqual((outcome.ok, outcome.error.kind, outcome.error.http_status, outcome.error.retry_after_seconds), (False, "error", 429, 30))
        self.assertEqual(fake.status["toolCalls"][0]["error"], {"message": "Too Many Requests", "httpStatus": 429, "retryAfterSeconds": 30})

        def fetch(args: Any, ctx: Any) -> None:
            import email

            raise urllib.error.HTTPError("http://x", 503, "Service Unavailable", email.message_from_string("Retry-After: 7\n\n"), None)  # type: ignore[arg-type]

        sandbox.tool("fetch", {}, fetch)
        self.assertEqual(fake.status["toolCalls"][1]["error"], {"message": "HTTP Error 503: Service Unavailable", "httpStatus": 503, "retryAfterSeconds": 7})

    def test_hands_invalid_arguments_back_without_running_the_tool(self) -> None:
        fake = self.fake()
        sandbox = self.start(fake)
        ran: list[Any] = []

        def validate(args: dict[str, Any]) -> None:
            issues = []
            if "@" not in str(args.get("to")):
                issues.append((["to"], "Invalid email address"))
            if not isinstance(args.get("subject"), str):
                issues.append((["subject"], "Invalid input: expected string, received number"))
            if issues:
                raise ToolValidationError(issues)

        outcome = sandbox.tool("send_email", {"to": "nobody", "subject": 3}, lambda a, c: ran.append(a), validate=validate)
        self.assertEqual(ran, [])
        assert outcome.error is not None
        self.assertEqual(outcome.error.kind, "validation")
        self.assertEqual(outcome.error.message, "invalid arguments for send_email: to: Invalid email address; subject: Invalid input: expected string, received number")
        record = fake.status["toolCalls"][0]
        self.assertEqual((record["state"], record["error"]["message"]), ("Failed", outcome.error.message))
        self.assertNotIn("ExecutingTool", [p["status"]["heartbeat"]["state"] for p in fake.patches])

    def test_keys_by_step_and_position(self) -> None:
        fake = self.fake()
        sandbox = self.start(fake)
        a = sandbox.tool("t", {"x": 1}, lambda a, c: 1, idempotent=True)
        b = sandbox.tool("t", {"x": 1}, lambda a, c: 1, idempotent=True)
        self.assertNotEqual(a.idempotency_key, b.idempotency_key)
        self.assertEqual(a.idempotency_key, idempotency_key("uid-r", 1, 0, "t", args_hash({"x": 1})))
        self.assertEqual(b.idempotency_key, idempotency_key("uid-r", 1, 1, "t", args_hash({"x": 1})))
        self.assertEqual(sandbox.step, 1)
        sandbox.save_checkpoint(1, {"n": 1})
        self.assertEqual(sandbox.step, 2)
        self.assertEqual(fake.status["checkpoint"], {"step": 1, "data": {"n": 1}})
        c = sandbox.tool("t", {"x": 1}, lambda a, c: 1, idempotent=True)
        self.assertEqual(c.idempotency_key, idempotency_key("uid-r", 2, 0, "t", args_hash({"x": 1})))

    def test_writes_the_whole_bounded_list_every_time_newest_last(self) -> None:
        fake = self.fake()
        sandbox = self.start(fake, max_tool_calls=5)
        for i in range(8):
            sandbox.tool("t", {"i": i}, lambda a, c: a["i"], idempotent=True)
        self.assertEqual([c["result"] for c in fake.status["toolCalls"]], ["3", "4", "5", "6", "7"])
        self.assertEqual(len(fake.patches[-1]["status"]["toolCalls"]), 5)

    def test_trims_what_earlier_attempts_left(self) -> None:
        calls = [{"id": f"a1-{i}", "name": "t", "argsHash": "h", "state": "Succeeded", "attempt": 1} for i in range(40)]
        calls.insert(30, {"id": "bogus", "state": "Started"})  # malformed: dropped alone
        fake = self.fake({"attempt": 2, "toolCalls": calls})
        sandbox = self.start(fake, attempt=2)
        self.assertEqual(len(sandbox.calls), 32)
        self.assertEqual(len(fake.patches[0]["status"]["toolCalls"]), 32)
        self.assertEqual(fake.status["toolCalls"][-1]["id"], "a1-39")
        self.assertNotIn("bogus", [c["id"] for c in sandbox.calls])


class ReplayTest(SandboxTestCase):
    def second_attempt(self, fake: FakeApiServer, first: Callable[[Sandbox], None]) -> Sandbox:
        one = self.start(fake)
        first(one)
        one.abandon()
        fake.operator({"attempt": 2, "phase": "Starting"})
        return self.start(fake, attempt=2)

    def test_returns_the_saved_result_of_a_call_that_succeeded_without_running_it(self) -> None:
        fake = self.fake()
        two = self.second_attempt(fake, lambda s: s.tool("lookup", {"q": "x"}, lambda a, c: {"found": "it"}, idempotent=True))
        ran: list[Any] = []
        outcome = two.tool("lookup", {"q": "x"}, lambda a, c: ran.append(a), idempotent=True)
        self.assertEqual(ran, [])
        self.assertEqual((outcome.ok, outcome.replayed, outcome.value), (True, True, {"found": "it"}))
        self.assertEqual(outcome.call_id, "a1-1")
        self.assertEqual([c["attempt"] for c in fake.status["toolCalls"]], [1])

    def unfinished(self, fake: FakeApiServer, name: str, args: dict[str, Any], idempotent: bool) -> tuple[Sandbox, dict[str, str]]:
        first: dict[str, str] = {}
        release = threading.Event()

        def dies_while_running(a: Any, ctx: Any) -> None:
            first["key"] = ctx.idempotency_key
            release.wait(10)  # the process dies while the tool runs

        def run(s: Sandbox) -> None:
            Background(lambda: s.tool(name, args, dies_while_running, idempotent=idempotent))
            eventually(lambda: "key" in first, what="the tool to start")

        two = self.second_attempt(fake, run)
        release.set()
        return two, first

    def test_reruns_an_unfinished_idempotent_call_with_the_same_key(self) -> None:
        fake = self.fake()
        two, first = self.unfinished(fake, "send", {"to": "a"}, idempotent=True)
        seen: list[tuple[str, bool]] = []
        outcome = two.tool("send", {"to": "a"}, lambda a, ctx: seen.append((ctx.idempotency_key, ctx.rerun)) or "sent", idempotent=True)
        self.assertEqual(seen, [(first["key"], True)])
        self.assertEqual((outcome.ok, outcome.replayed, outcome.value), (True, False, "sent"))
        records = [(c["attempt"], c["state"], c["idempotencyKey"] == first["key"]) for c in fake.status["toolCalls"]]
        self.assertEqual(records, [(1, "Started", True), (2, "Succeeded", True)])

    def test_refuses_an_unfinished_non_idempotent_call(self) -> None:
        fake = self.fake()
        two, _ = self.unfinished(fake, "charge", {"cents": 100}, idempotent=False)
        ran: list[Any] = []
        with self.assertRaises(UnconfirmedSideEffectError) as caught:
            two.tool("charge", {"cents": 100}, lambda a, c: ran.append(a))
        self.assertEqual(ran, [])
        self.assertEqual(caught.exception.call["name"], "charge")
        self.assertEqual([c["state"] for c in fake.status["toolCalls"]], ["Started"])

    def test_reports_instead_of_refusing_once_a_person_resumed_the_run(self) -> None:
        key = idempotency_key("uid-r", 1, 0, "charge", args_hash({}))
        started = {"id": "a1-1", "name": "charge", "argsHash": args_hash({}), "idempotencyKey": key, "state": "Started", "attempt": 1, "idempotent": False}
        fake = self.fake({"attempt": 2, "toolCalls": [started], "toolCallsResetAfter": "a1-1"})
        two = self.start(fake, attempt=2)
        ran: list[Any] = []
        outcome = two.tool("charge", {}, lambda a, c: ran.append(a))
        assert outcome.error is not None
        self.assertEqual((outcome.ok, outcome.error.kind, ran), (False, "unconfirmed", []))

    def test_exits_with_the_unconfirmed_side_effect_code(self) -> None:
        # Attempt 1 started t({}) as the first call of step 1 and died; attempt 2 makes the same
        # call. The record is the one the TypeScript SDK writes (its key from ts_fixtures).
        ts = next(c for c in KEY_CASES if c[0] == "uid-r" and c[3] == "t")
        started = {"id": "a1-1", "name": "t", "argsHash": ts[5], "idempotencyKey": ts[6], "state": "Started", "attempt": 1, "idempotent": False}
        fake = self.fake({"attempt": 2, "toolCalls": [started]})
        ran: list[Any] = []
        code, exits = self.run_agent(fake, lambda s: s.tool("t", {}, lambda a, c: ran.append(a)), attempt=2)
        self.assertEqual((code, exits, ran), (ExitCode.UNCONFIRMED_SIDE_EFFECT, [3], []))

    def test_resumes_from_the_checkpoint_and_shows_why_the_last_attempt_ended(self) -> None:
        fake = self.fake()
        two = self.second_attempt(fake, lambda s: s.save_checkpoint(3, {"notes": ["a"]}))
        self.assertEqual(two.load_checkpoint(), {"step": 3, "data": {"notes": ["a"]}})
        self.assertEqual(two.step, 4)
        two.abandon()
        fake.operator({"attempt": 3, "lastFailure": {"reason": "PodFailed", "message": "exit code 1", "time": "2026-11-30T12:00:00Z", "attempt": 2}})
        three = self.start(fake, attempt=3)
        assert three.last_failure is not None
        self.assertEqual((three.last_failure["reason"], three.last_failure["message"]), ("PodFailed", "exit code 1"))


class NudgeTest(SandboxTestCase):
    def test_delivers_each_new_nudge_once_through_the_watch_and_ignores_the_one_standing_at_start(self) -> None:
        fake = self.fake({"stall": {"state": "Fired", "nudges": 1, "lastNudge": {"time": "2026-11-30T11:59:55Z", "message": "old"}}})
        got: list[str] = []
        sandbox = self.start(fake, on_nudge=lambda n: got.append(n.message))
        waiting = Background(lambda: sandbox.next_nudge(timeout=10))
        fake.operator({"phase": "Planning"})
        time.sleep(0.2)
        self.assertEqual(got, [])
        fake.operator({"stall": {"state": "Fired", "nudges": 2, "lastNudge": {"time": "2026-11-30T12:00:01Z", "message": "wake up"}}})
        nudge = waiting.join()
        self.assertEqual((nudge.message, nudge.count), ("wake up", 2))
        fake.operator({"phase": "Planning", "reason": "again"})
        sandbox.say("still here")  # our own write is a watch event too
        time.sleep(0.3)
        self.assertEqual(got, ["wake up"])
        self.assertEqual([e.text for e in sandbox.transcript if e.kind == "nudge"], ["wake up"])

    def test_a_dropped_watch_is_reestablished(self) -> None:
        fake = self.fake()
        got: list[str] = []
        sandbox = self.start(fake, on_nudge=lambda n: got.append(n.message))
        fake.drop_watches()
        fake.operator({"stall": {"state": "Fired", "nudges": 1, "lastNudge": {"time": "2026-11-30T12:00:01Z", "message": "after a reconnect"}}})
        eventually(lambda: got == ["after a reconnect"], what="the nudge after the reconnect")
        self.assertGreaterEqual(sandbox.stats().watch_restarts, 1)


class FencingTest(SandboxTestCase):
    def test_stops_the_agent_and_all_writes_when_the_attempt_moves_on(self) -> None:
        fake = self.fake()
        fenced: list[str] = []
        sandbox = self.start(fake, on_fenced=fenced.append)
        in_tool = threading.Event()
        tool_saw_abort: list[bool] = []

        def slow(args: Any, ctx: Any) -> str:
            in_tool.set()
            tool_saw_abort.append(ctx.signal.wait(10))
            return "finished anyway"

        running = Background(lambda: sandbox.tool("slow", {}, slow, idempotent=True))
        in_tool.wait(10)
        writes = len(fake.patches)
        fake.operator({"attempt": 2, "phase": "Queued"})
        with self.assertRaises(FencedError):
            running.join()
        self.assertEqual(fenced, ["attempt 1 was superseded by attempt 2"])
        self.assertEqual(tool_saw_abort, [True])
        self.assertTrue(sandbox.signal.aborted)
        self.assertEqual(sandbox.fenced, "attempt 1 was superseded by attempt 2")
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            sandbox.progress()
            time.sleep(0.05)
        self.assertEqual(len(fake.patches), writes)  # not even the tool's result
        with self.assertRaises(FencedError):
            sandbox.say("still here?")
        with self.assertRaises(FencedError):
            sandbox.save_checkpoint(2)

    def test_stops_when_the_operator_stops_the_run_or_it_is_deleted(self) -> None:
        fake = self.fake()
        sandbox = self.start(fake)
        fake.operator({"phase": "NeedsHumanIntervention"})
        eventually(lambda: sandbox.fenced is not None, what="fencing")
        self.assertEqual(sandbox.fenced, "the run is NeedsHumanIntervention")

        other = self.fake()
        deleted = self.start(other)
        other.delete()
        eventually(lambda: deleted.fenced is not None, what="fencing")
        self.assertEqual(deleted.fenced, "the run was deleted")

    def test_run_agent_aborts_an_agent_busy_in_its_own_code(self) -> None:
        fake = self.fake()
        reached: list[str] = []

        def main(s: Sandbox) -> None:
            s.save_checkpoint(1)
            fake.operator({"attempt": 2, "phase": "Queued"})
            deadline = time.monotonic() + 10
            n = 0
            while time.monotonic() < deadline:  # pure Python work that never asks the SDK
                n += 1
            reached.append("the end")  # never: FencedError is raised into this loop

        code, exits = self.run_agent(fake, main)
        self.assertEqual((code, exits, reached), (ExitCode.FENCED, [4], []))

    def test_run_agent_exits_as_fenced_when_the_agent_stops_on_the_signal(self) -> None:
        fake = self.fake()

        def main(s: Sandbox) -> None:
            fake.operator({"attempt": 2})
            if s.signal.wait(10):
                raise RuntimeError("aborted by the agent's own code")

        code, exits = self.run_agent(fake, main, interrupt_on_fence=False)
        self.assertEqual((code, exits), (ExitCode.FENCED, [4]))


class ApprovalTest(SandboxTestCase):
    KEY = "watchdog.dev/approval-request"

    def asked_key(self, fake: FakeApiServer) -> str:
        return fake.status["checkpoint"]["data"][self.KEY]["key"]

    def asked(self, fake: FakeApiServer) -> list[dict[str, Any]]:
        return [p for p in fake.patches if p["status"]["heartbeat"]["state"] == "AwaitingReply"]

    def awaiting(self, fake: FakeApiServer, count: int = 1) -> None:
        fake.wait_for(lambda: len(self.asked(fake)) >= count and (fake.run["status"].get("approval") or {}).get("state") == "Pending", what="the request")

    def decide(self, fake: FakeApiServer, **approval: Any) -> None:
        fake.operator({"approval": {"decidedAt": "2026-11-30T12:00:00Z", **approval}})

    def resumed_run(self, **approval: Any) -> FakeApiServer:
        """A run an earlier attempt left waiting on "Deploy?" under key k1, and where req-1 stands."""
        return self.fake({
            "attempt": 2,
            "approval": {"id": "req-1", "requestKey": "k1", "question": "Deploy?", "attempt": 1, "requestedAt": "2026-11-30T11:59:00Z", **approval},
            "checkpoint": {"step": 1, "data": {self.KEY: {"question": "Deploy?", "askedAt": "2026-11-30T11:58:59Z", "key": "k1"}, "data": {"v": 2}}},
        })

    def test_asks_with_a_checkpoint_and_a_new_key_reports_awaiting_reply_and_returns_the_answer(self) -> None:
        fake = self.fake({"phase": "Planning"})
        sandbox = self.start(fake)
        answer = Background(lambda: sandbox.await_approval("Deploy?", {"step": 2, "data": {"v": 2}}))
        self.awaiting(fake)
        checkpoint = fake.status["checkpoint"]
        self.assertEqual(checkpoint["step"], 2)
        self.assertEqual(checkpoint["data"]["data"], {"v": 2})
        self.assertEqual(checkpoint["data"][self.KEY]["question"], "Deploy?")
        self.assertRegex(self.asked_key(fake), r"^[0-9a-f]{32}$")
        approval = fake.status["approval"]
        self.assertEqual((approval["id"], approval["question"], approval["requestKey"]), ("req-1", "Deploy?", self.asked_key(fake)))
        time.sleep(0.3)
        self.assertFalse(answer.done)
        self.decide(fake, state="Approved", answer="go")
        self.assertEqual(answer.join(), "go")
        self.assertEqual(fake.status["heartbeat"]["state"], "Planning")
        self.assertEqual(sandbox.load_checkpoint(), {"step": 2, "data": {"v": 2}})

    def test_gets_its_own_answer_to_each_of_two_requests_asked_and_answered_within_one_second(self) -> None:
        fake = self.fake({"phase": "Planning"})
        sandbox = self.start(fake)
        began = time.monotonic()
        first = Background(lambda: sandbox.await_approval("Deploy?"))
        self.awaiting(fake)
        first_key = self.asked_key(fake)
        self.decide(fake, state="Approved", answer="yes, deploy")
        self.assertEqual(first.join(), "yes, deploy")
        second = Background(lambda: sandbox.await_approval("Migrate the database?"))
        self.awaiting(fake, 2)
        self.assertNotEqual(self.asked_key(fake), first_key)
        self.assertEqual(fake.status["approval"]["id"], "req-2")
        self.decide(fake, state="Approved", answer="yes, migrate")  # decidedAt: the same second
        self.assertEqual(second.join(), "yes, migrate")
        self.assertLess(time.monotonic() - began, 5)

    def test_never_settles_on_the_decision_of_another_request(self) -> None:
        fake = self.fake({"phase": "Planning"})
        sandbox = self.start(fake)
        answer = Background(lambda: sandbox.await_approval("Deploy?"))
        self.awaiting(fake)
        key = self.asked_key(fake)
        self.decide(fake, id="req-0", requestKey="someone-else", state="Approved", answer="not yours")
        self.decide(fake, id="req-7", requestKey=key, state="Approved", answer="another request's")
        self.decide(fake, id="req-8", requestKey=None, state="Rejected", reason="not yours either")
        time.sleep(0.5)
        self.assertFalse(answer.done)
        self.decide(fake, id="req-1", requestKey=key, state="Approved", answer="yours", reason=None)
        self.assertEqual(answer.join(), "yours")

    def test_in_a_new_attempt_answers_the_same_question_from_the_approval_found_at_start_without_asking_again(self) -> None:
        fake = self.resumed_run(state="Approved", decidedAt="2026-11-30T11:59:59Z", answer="ship it")
        sandbox = self.start(fake, attempt=2)
        pending = sandbox.pending_approval
        assert pending is not None
        self.assertEqual((pending.question, pending.outcome.state, pending.outcome.answer), ("Deploy?", "Approved", "ship it"))
        self.assertEqual(sandbox.load_checkpoint(), {"step": 1, "data": {"v": 2}})
        self.assertEqual(sandbox.await_approval("Deploy?", {"step": 1, "data": {"v": 2}}), "ship it")
        self.assertEqual(self.asked(fake), [])

    def test_in_a_new_attempt_asks_anew_when_the_first_question_is_a_different_one(self) -> None:
        fake = self.resumed_run(state="Approved", decidedAt="2026-11-30T11:59:59Z", answer="ship it")
        sandbox = self.start(fake, attempt=2)
        answer = Background(lambda: sandbox.await_approval("Delete the old index?"))
        self.awaiting(fake)
        time.sleep(0.2)
        self.assertFalse(answer.done)  # not "ship it": that answers "Deploy?"
        self.assertEqual(fake.status["checkpoint"]["data"][self.KEY]["question"], "Delete the old index?")
        self.assertNotEqual(self.asked_key(fake), "k1")
        self.assertEqual(fake.status["approval"]["question"], "Delete the old index?")
        self.decide(fake, state="Approved", answer="yes, delete it")
        self.assertEqual(answer.join(), "yes, delete it")
        self.assertIsNone(sandbox.pending_approval)  # the resumed request was dropped

    def test_in_a_new_attempt_waits_on_the_request_still_pending_under_its_key(self) -> None:
        fake = self.resumed_run(state="Pending")
        sandbox = self.start(fake, attempt=2)
        sandbox.save_checkpoint(1, {"v": 3})  # a checkpoint of the agent's own replaces the one with the question
        answer = Background(lambda: sandbox.await_approval("Deploy?"))
        fake.wait_for(lambda: len(self.asked(fake)) == 1, what="AwaitingReply")
        checkpoint = self.asked(fake)[0]["status"].get("checkpoint")
        assert checkpoint is not None
        self.assertEqual((checkpoint["data"][self.KEY]["key"], checkpoint["data"]["data"]), ("k1", {"v": 3}))
        self.assertEqual((fake.status["approval"]["id"], fake.status["approval"]["state"]), ("req-1", "Pending"))  # the same request
        self.decide(fake, state="Approved", answer="go")
        self.assertEqual(answer.join(), "go")

    def test_asks_again_under_a_new_key_when_the_request_it_resumes_was_withdrawn(self) -> None:
        fake = self.resumed_run(state="Withdrawn", decidedAt="2026-11-30T11:59:59Z")
        sandbox = self.start(fake, attempt=2)
        pending = sandbox.pending_approval
        assert pending is not None
        self.assertEqual(pending.outcome.state, "Withdrawn")
        answer = Background(lambda: sandbox.await_approval("Deploy?"))
        self.awaiting(fake)
        self.assertNotEqual(self.asked_key(fake), "k1")
        self.assertEqual(fake.status["approval"]["requestKey"], self.asked_key(fake))
        self.decide(fake, state="Approved", answer="go")
        self.assertEqual(answer.join(), "go")

    def test_asks_again_under_a_new_key_when_its_request_is_withdrawn_while_it_waits(self) -> None:
        fake = self.fake({"phase": "Planning"})
        sandbox = self.start(fake)
        answer = Background(lambda: sandbox.await_approval("Deploy?"))
        self.awaiting(fake)
        first = self.asked_key(fake)
        self.decide(fake, state="Withdrawn")
        self.awaiting(fake, 2)
        # It left the wait (so the operator saw it), then asked again.
        states = [p["status"]["heartbeat"]["state"] for p in fake.patches]
        self.assertEqual(states[-3:], ["AwaitingReply", "Planning", "AwaitingReply"])
        self.assertNotEqual(self.asked_key(fake), first)
        self.assertEqual((fake.status["approval"]["id"], fake.status["approval"]["requestKey"]), ("req-2", self.asked_key(fake)))
        self.decide(fake, state="Approved", answer="go")
        self.assertEqual(answer.join(), "go")

    def test_asks_an_older_sdks_request_without_a_key_again(self) -> None:
        fake = self.fake({
            "attempt": 2,
            "approval": {"id": "req-0", "state": "Approved", "requestedAt": "2026-11-30T11:59:00Z", "decidedAt": "2026-11-30T11:59:59Z", "answer": "whose?"},
            "checkpoint": {"step": 1, "data": {self.KEY: {"question": "Deploy?", "askedAt": "2026-11-30T11:58:59Z", "supersedes": "x"}}},
        })
        sandbox = self.start(fake, attempt=2)
        answer = Background(lambda: sandbox.await_approval("Deploy?"))
        self.awaiting(fake)
        self.decide(fake, state="Approved", answer="this one's")
        self.assertEqual(answer.join(), "this one's")

    def test_waits_for_the_operator_to_see_it_leave_the_previous_wait_before_asking(self) -> None:
        fake = self.fake({"phase": "AwaitingReply"})
        fake.reconciles = False  # an operator that has not caught up yet
        sandbox = self.start(fake)
        asked = Background(lambda: sandbox.request_approval("Next?"))
        time.sleep(0.3)
        self.assertFalse(asked.done)
        self.assertEqual(self.asked(fake), [])
        fake.operator({"phase": "Planning"})
        asked.join()
        self.assertEqual(fake.status["heartbeat"]["state"], "AwaitingReply")

    def test_ends_with_the_rejection_and_its_exit_code(self) -> None:
        fake = self.fake({"phase": "Planning"})
        sandbox = self.start(fake)
        answer = Background(lambda: sandbox.await_approval("Deploy?"))
        self.awaiting(fake)
        fake.operator({"phase": "Failed", "approval": {"state": "Rejected", "reason": "not today", "decidedAt": "2026-11-30T12:00:01Z"}})
        with self.assertRaisesRegex(ApprovalDeniedError, "approval rejected: not today"):
            answer.join()

        other = self.fake({"phase": "Planning"})

        def main(s: Sandbox) -> None:
            pending = s.request_approval("Deploy?")
            other.operator({"phase": "Failed", "approval": {"state": "Rejected", "decidedAt": "2026-11-30T12:00:00Z"}})
            s.wait_for_approval(pending)

        code, exits = self.run_agent(other, main)
        self.assertEqual((code, exits), (ExitCode.APPROVAL_DENIED, [5]))

    def test_a_released_pod_is_fenced_while_it_waits(self) -> None:
        fake = self.fake({"phase": "Planning"})
        sandbox = self.start(fake)
        answer = Background(lambda: sandbox.await_approval("Deploy?"))
        self.awaiting(fake)
        fake.operator({"attempt": 2, "phase": "AwaitingReply"})  # released: the next attempt gets the answer
        with self.assertRaises(FencedError):
            answer.join()


class EndingTest(SandboxTestCase):
    def test_exits_0_when_the_work_returns_after_flushing_what_it_reported(self) -> None:
        fake = self.fake()
        code, exits = self.run_agent(fake, lambda s: s.say("bye", wait=False))
        self.assertEqual((code, exits), (0, [0]))
        self.assertEqual(fake.status["heartbeat"]["activity"]["kind"], "text")

    def test_exits_non_zero_with_a_code_that_says_why(self) -> None:
        def boom(s: Sandbox) -> None:
            raise RuntimeError("boom")

        self.assertEqual(self.run_agent(self.fake(), boom), (ExitCode.FAILED, [1]))
        self.assertEqual(self.run_agent(self.fake(), lambda s: exit(7)), (7, [7]))
        self.assertEqual(self.run_agent(self.fake(), lambda s: exit(0)), (0, [0]))

    def test_exits_6_when_the_agent_gives_up_right_after_a_call_failed_with_429(self) -> None:
        def rate_limited(args: Any, ctx: Any) -> None:
            raise ToolError("429 Too Many Requests", http_status=429, retry_after_seconds=5)

        def gives_up(s: Sandbox) -> None:
            outcome = s.tool("call_model", {"prompt": "hi"}, rate_limited, idempotent=True)
            if not outcome.ok:
                raise RuntimeError("giving up this attempt")

        self.assertEqual(self.run_agent(self.fake(), gives_up), (ExitCode.RATE_LIMITED, [6]))

        def wraps(s: Sandbox) -> None:
            try:
                rate_limited(None, None)
            except ToolError as err:
                raise RuntimeError("the model gave up") from err

        self.assertEqual(self.run_agent(self.fake(), wraps), (ExitCode.RATE_LIMITED, [6]))

    def test_exits_1_when_the_rate_limited_call_is_not_this_attempts_newest(self) -> None:
        def rate_limited(args: Any, ctx: Any) -> None:
            raise ToolError("429 Too Many Requests", http_status=429)

        def main(s: Sandbox) -> None:
            s.tool("call_model", {"prompt": "hi"}, rate_limited, idempotent=True)
            s.tool("call_model", {"prompt": "again"}, lambda a, c: "answered", idempotent=True)
            raise RuntimeError("something else went wrong")

        self.assertEqual(self.run_agent(self.fake(), main), (ExitCode.FAILED, [1]))
        # An earlier attempt's 429 is not this attempt's reason to give up.
        earlier = self.fake({"attempt": 2, "toolCalls": [{"id": "a1-1", "name": "call_model", "argsHash": "h", "state": "Failed", "attempt": 1, "error": {"message": "429", "httpStatus": 429}}]})

        def boom(s: Sandbox) -> None:
            raise RuntimeError("boom")

        self.assertEqual(self.run_agent(earlier, boom, attempt=2), (ExitCode.FAILED, [1]))

    def test_exits_2_outside_a_sandbox(self) -> None:
        exits: list[int] = []
        self.assertEqual(run_agent(lambda s: None, env={}, exit=exits.append, logger=SILENT), ExitCode.CONFIG)
        self.assertEqual(exits, [2])

    def test_leaves_the_failure_message_for_the_kubelet_only_in_a_file_that_exists(self) -> None:
        directory = tempfile.mkdtemp()
        self.addCleanup(lambda: __import__("shutil").rmtree(directory, ignore_errors=True))
        existing = os.path.join(directory, "termination-log")
        with open(existing, "w") as f:
            f.write("x" * 100)
        missing = os.path.join(directory, "absent")

        def out_of_tokens(s: Sandbox) -> None:
            raise RuntimeError("out of tokens")

        for path in (existing, missing):
            self.run_agent(self.fake(), out_of_tokens, termination_log_path=path)
        with open(existing) as f:
            self.assertEqual(f.read(), "RuntimeError: out of tokens")
        self.assertFalse(os.path.exists(missing))


if __name__ == "__main__":
    unittest.main()
