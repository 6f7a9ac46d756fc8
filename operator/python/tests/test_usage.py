"""Usage and the run's budget (usage.py), as test/unit/sandbox/usage.test.ts and the usage tests of
sandbox.test.ts check the TypeScript SDK: exact costs, reports that never go down within an attempt
(the fake API server refuses a lowering write, as the CRD's rule does), usage in every heartbeat,
and the cooperative refusal once a limit is reached."""

from __future__ import annotations

import decimal
import random
import threading
import time
import unittest
from typing import Any

from agent_watchdog import BudgetBreach, BudgetExhaustedError, ExitCode, Sandbox
from agent_watchdog.read_run import read_run
from agent_watchdog.usage import MAX_COST, SCALE, BudgetView, UsageMeter, parse_cost

from test_sandbox import SandboxTestCase, eventually, heartbeat_only

D = decimal.Decimal
PRICES = [
    {"model": "small", "inputPerMillion": "0.15", "outputPerMillion": "0.60"},
    {"model": "large", "inputPerMillion": "3.00", "outputPerMillion": "15.00"},
]


def not_lower(previous: dict[str, Any], nxt: dict[str, Any]) -> bool:
    """Whether the API server accepts ``nxt`` after ``previous`` within one attempt."""
    for field in ("inputTokens", "outputTokens", "toolCalls"):
        if field in previous and not (field in nxt and nxt[field] >= previous[field]):
            return False
    if "cost" in previous and not ("cost" in nxt and parse_cost(nxt["cost"]) >= parse_cost(previous["cost"])):
        return False
    return True


class ParseCostTest(unittest.TestCase):
    def test_reads_decimals_exactly_and_rounds_up_past_18_digits(self) -> None:
        cases: list[tuple[Any, int]] = [
            ("0.0123", 123 * 10**14),
            ("12", 12 * SCALE),
            (".5", SCALE // 2),
            (D("3.25"), 325 * 10**16),
            (D("1E+2"), 100 * SCALE),
            (0.1, SCALE // 10),
            (1e-7, 10**11),
            (7, 7 * SCALE),
            ("0.000000000000000001", 1),
            ("0.0000000000000000001", 1),
            (1e30, MAX_COST),
            (D(0), 0),
        ]
        for value, scaled in cases:
            with self.subTest(value=value):
                self.assertEqual(parse_cost(value), scaled)

    def test_refuses_what_is_not_a_non_negative_decimal(self) -> None:
        for value in ("-1", -0.5, float("nan"), float("inf"), D("NaN"), D("-0.1"), "1,5", "", "1e3"):
            with self.subTest(value=value):
                with self.assertRaises(ValueError):
                    parse_cost(value)  # type: ignore[arg-type]
        for value in (True, [1], None):
            with self.subTest(value=value):
                with self.assertRaises(TypeError):
                    parse_cost(value)  # type: ignore[arg-type]


class UsageMeterTest(unittest.TestCase):
    def test_never_reports_less_than_before_whatever_it_is_given(self) -> None:
        rng = random.Random(7)
        for _ in range(200):
            meter = UsageMeter()
            previous = meter.report()
            self.assertEqual(previous, {"inputTokens": 0, "outputTokens": 0, "toolCalls": 0})
            for _ in range(rng.randint(0, 20)):
                if rng.random() < 0.2:
                    meter.tool_call()
                else:
                    cost = rng.choice([None, None, f"{rng.randint(0, 99)}.{rng.randint(0, 10**20)}"])
                    meter.record(PRICES, rng.randint(0, 5_000_000), rng.randint(0, 500_000), cost, rng.choice([None, "small", "large"]))
                nxt = meter.report()
                self.assertTrue(not_lower(previous, nxt), (previous, nxt))
                previous = nxt

    def test_adds_costs_exactly(self) -> None:
        meter = UsageMeter()
        for _ in range(10):
            meter.record([], cost=0.1)
        self.assertEqual(meter.report()["cost"], "1")
        meter.record([], cost=D("0.000000000000000001"))
        self.assertEqual(meter.report()["cost"], "1.000000000000000001")

    def test_leaves_the_cost_to_the_operator_with_one_model_then_reports_it_for_the_attempt(self) -> None:
        meter = UsageMeter()
        meter.record(PRICES, 1_000_000, 1_000_000, model="small")
        meter.record(PRICES, 1_000_000)
        self.assertEqual(meter.report(), {"inputTokens": 2_000_000, "outputTokens": 1_000_000, "toolCalls": 0, "model": "small"})
        self.assertEqual(meter.figures(PRICES)[2], parse_cost("0.9"))
        meter.record(PRICES, 100_000, 10_000, model="large")
        self.assertEqual(meter.report()["cost"], "1.35")

    def test_refuses_a_malformed_report_without_adding_any_of_it(self) -> None:
        meter = UsageMeter()
        meter.record([], 5, cost="0.5")
        for bad in ({"input_tokens": -1}, {"output_tokens": 1.5}, {"input_tokens": True}, {"input_tokens": 1, "cost": "-0.1"}, {"input_tokens": 1, "model": ""}):
            with self.subTest(bad=bad):
                with self.assertRaises((ValueError, TypeError)):
                    meter.record([], **bad)
        self.assertEqual(meter.report(), {"inputTokens": 5, "outputTokens": 0, "cost": "0.5", "toolCalls": 0})

    def test_caps_at_what_the_crd_admits(self) -> None:
        meter = UsageMeter()
        meter.record([], 2**53 - 1, cost="999999999999999999")
        meter.record([], 10, cost="10")
        self.assertEqual(meter.report()["inputTokens"], 2**53 - 1)
        self.assertEqual(meter.report()["cost"], "999999999999999999.999999999999999999")


class BudgetViewTest(unittest.TestCase):
    def test_reads_garbage_as_no_limit_and_nothing_spent(self) -> None:
        view = BudgetView(2)
        garbage = {"spec": {"budget": {"tokens": -1, "cost": {"amount": "lots"}, "prices": [{"model": 1}, "x"]}}, "status": {"spent": {"inputTokens": "9", "cost": 12}}}
        for run in (None, 3, "x", {"spec": 1}, garbage):
            view.observe(run)
            self.assertFalse(view.limited)
            self.assertEqual(view.prices, [])
            self.assertEqual(view.spending((1, 2, 3, 4)), (1, 2, 3, 4))

    def test_does_not_add_its_own_usage_once_spent_holds_its_attempt(self) -> None:
        view = BudgetView(2)
        view.observe({"spec": {"budget": {"tokens": 10}}, "status": {"spent": {"inputTokens": 10, "outputTokens": 0, "cost": "0", "toolCalls": 0, "throughAttempt": 2}}})
        self.assertEqual(view.spending((10, 0, 0, 0))[0], 10)
        self.assertEqual([b.limit for b in view.breaches(view.spending((10, 0, 0, 0)))], ["tokens"])

    def test_read_run_keeps_a_heartbeat_with_usage(self) -> None:
        usage = {"inputTokens": 1, "outputTokens": 2, "cost": "0.5", "toolCalls": 3, "model": "m"}
        run = {"metadata": {}, "spec": {"template": {}}, "status": {"heartbeat": {"time": "2026-11-30T12:00:00Z", "attempt": 1, "state": "Planning", "usage": usage}}}
        read = read_run(run)
        self.assertEqual(read.problems, [])
        self.assertEqual(read.status["heartbeat"]["usage"], usage)


def spent(**figures: Any) -> dict[str, Any]:
    return {"spent": {"inputTokens": 0, "outputTokens": 0, "cost": "0", "toolCalls": 0, "throughAttempt": 1, **figures}}


class UsageInHeartbeatsTest(SandboxTestCase):
    def test_the_first_write_reports_zeros_and_clears_an_earlier_attempts_cost_and_model(self) -> None:
        earlier = {"time": "2026-11-30T11:00:00Z", "attempt": 1, "state": "Planning", "usage": {"inputTokens": 9000, "outputTokens": 900, "cost": "1.25", "toolCalls": 4, "model": "m"}}
        fake = self.fake({"attempt": 2, "heartbeat": earlier})
        self.start(fake, attempt=2)
        self.assertEqual(fake.patches[0]["status"]["heartbeat"]["usage"], {"inputTokens": 0, "outputTokens": 0, "toolCalls": 0, "cost": None, "model": None})
        self.assertEqual(fake.status["heartbeat"]["usage"], {"inputTokens": 0, "outputTokens": 0, "toolCalls": 0})

    def test_goes_on_from_what_its_own_attempt_already_reported(self) -> None:
        earlier = {"time": "2026-11-30T11:00:00Z", "attempt": 1, "state": "Planning", "usage": {"inputTokens": 9000, "outputTokens": 900, "cost": "1.25", "toolCalls": 4, "model": "m"}}
        fake = self.fake({"heartbeat": earlier})
        sandbox = self.start(fake)
        self.assertEqual(fake.status["heartbeat"]["usage"], earlier["usage"])
        sandbox.record_usage(input_tokens=1000, cost=D("0.75"))
        self.assertEqual(sandbox.usage, {"inputTokens": 10_000, "outputTokens": 900, "cost": "2", "toolCalls": 4, "model": "m"})

    def test_rides_the_next_heartbeat_adds_exactly_and_counts_each_recorded_tool_call_once(self) -> None:
        fake = self.fake()  # heartbeatTimeout 2s: a heartbeat-only write every 0.5 s
        sandbox = self.start(fake)
        writes = len(fake.patches)
        for cost in ("0.1", D("0.1"), 0.1):
            sandbox.record_usage(input_tokens=100, output_tokens=20, cost=cost)
        self.assertEqual(len(fake.patches), writes)  # a change of usage alone is no reason to write
        eventually(lambda: any(heartbeat_only(p) for p in fake.patches[writes:]), what="a heartbeat")
        self.assertEqual(fake.status["heartbeat"]["usage"], {"inputTokens": 300, "outputTokens": 60, "cost": "0.3", "toolCalls": 0})

        self.assertTrue(sandbox.tool("lookup", {"q": 1}, lambda a, c: "found", idempotent=True).ok)

        def invalid(args: Any) -> Any:
            raise ValueError("q must be a string")

        self.assertFalse(sandbox.tool("lookup", {"q": 2}, lambda a, c: "found", validate=invalid).ok)
        sandbox.say("done")
        self.assertEqual(fake.status["heartbeat"]["usage"]["toolCalls"], 2)
        self.assertTrue(all(p["status"]["heartbeat"]["usage"]["inputTokens"] == 300 for p in fake.patches[writes:]))

    def test_does_not_count_a_saved_result_an_earlier_attempt_left(self) -> None:
        from agent_watchdog import args_hash, idempotency_key

        key = idempotency_key("uid-r", 1, 0, "t", args_hash({}))
        saved = {"id": "a1-1", "name": "t", "argsHash": args_hash({}), "idempotencyKey": key, "state": "Succeeded", "attempt": 1, "result": '"saved"'}
        fake = self.fake({"attempt": 2, "toolCalls": [saved]})
        sandbox = self.start(fake, attempt=2)
        self.assertTrue(sandbox.tool("t", {}, lambda a, c: "again").replayed)
        self.assertFalse(sandbox.tool("t", {"n": 2}, lambda a, c: "new").replayed)
        self.assertEqual(fake.status["heartbeat"]["usage"]["toolCalls"], 1)

    def test_sends_usage_recorded_just_before_the_end_with_the_last_write(self) -> None:
        fake = self.fake()
        code, _ = self.run_agent(fake, lambda s: s.record_usage(input_tokens=7, output_tokens=3, model="m"))
        self.assertEqual(code, 0)
        self.assertEqual(fake.status["heartbeat"]["usage"], {"inputTokens": 7, "outputTokens": 3, "toolCalls": 0, "model": "m"})


class BudgetTest(SandboxTestCase):
    def test_adds_usage_to_what_ended_attempts_spent_and_refuses_more_work_at_a_limit(self) -> None:
        fake = self.fake({"attempt": 2, **spent(inputTokens=500)}, {"budget": {"tokens": 1000}})
        sandbox = self.start(fake, attempt=2)
        sandbox.record_usage(input_tokens=400, output_tokens=99)
        self.assertEqual(sandbox.check_budget(), [])
        sandbox.assert_within_budget()
        writes = len(fake.patches)

        sandbox.record_usage(output_tokens=1)
        # The report that reaches a limit goes out at once, not with the next heartbeat.
        fake.wait_for(lambda: len(fake.patches) > writes, timeout=0.4, what="the report that reaches the limit")
        self.assertEqual(fake.status["heartbeat"]["usage"]["outputTokens"], 100)
        self.assertEqual(sandbox.spending().tokens, 1000)
        self.assertEqual(sandbox.check_budget(), [BudgetBreach("tokens", "1000", "1000", "token budget exhausted: 1000 of 1000 tokens spent")])
        with self.assertRaises(BudgetExhaustedError) as raised:
            sandbox.assert_within_budget()
        self.assertEqual(raised.exception.limit, "tokens")
        self.assertIn("spec.budget.tokens", str(raised.exception))

        ran: list[int] = []
        with self.assertRaises(BudgetExhaustedError):
            sandbox.tool("lookup", {}, lambda a, c: ran.append(1))
        self.assertEqual(ran, [])
        self.assertNotIn("toolCalls", fake.status)

    def test_follows_the_effective_limits_the_operator_publishes(self) -> None:
        fake = self.fake({"attempt": 2, **spent(toolCalls=2)}, {"budget": {"toolCalls": 2}})
        sandbox = self.start(fake, attempt=2)
        self.assertEqual([b.limit for b in sandbox.check_budget()], ["toolCalls"])
        fake.operator({"budget": {"toolCalls": 3, "warnAt": 0.8}})
        eventually(lambda: sandbox.check_budget() == [], what="the new limit")
        self.assertTrue(sandbox.tool("t", {}, lambda a, c: 1).ok)
        self.assertEqual([b.limit for b in sandbox.check_budget()], ["toolCalls"])

    def test_compares_cost_exactly(self) -> None:
        fake = self.fake(None, {"budget": {"cost": {"amount": "0.80", "currency": "USD"}}})
        sandbox = self.start(fake)
        self.assertLess(0.7 + 0.1, 0.8)  # what floats would say
        sandbox.record_usage(input_tokens=1, cost=0.7)
        self.assertEqual(sandbox.check_budget(), [])
        sandbox.record_usage(input_tokens=1, cost="0.1")
        self.assertEqual(sandbox.check_budget(), [BudgetBreach("cost", "0.8", "0.8", "cost budget exhausted: 0.8 of 0.80 USD spent")])
        self.assertEqual(sandbox.spending().cost, D("0.8"))

    def test_run_agent_waits_heartbeating_for_the_operator_to_stop_the_run_then_exits_as_fenced(self) -> None:
        fake = self.fake(None, {"budget": {"tokens": 100}})

        def main(sandbox: Sandbox) -> None:
            sandbox.record_usage(input_tokens=60, output_tokens=40)
            sandbox.assert_within_budget()

        def operator() -> None:
            fake.wait_for(lambda: (fake.status.get("heartbeat") or {}).get("usage", {}).get("inputTokens") == 60, what="the report")
            time.sleep(1.5)  # heartbeats go on meanwhile
            fake.operator({"phase": "NeedsHumanIntervention"})

        stopper = threading.Thread(target=operator, daemon=True)
        stopper.start()
        writes_before = len(fake.patches)
        started = time.monotonic()
        code, exits = self.run_agent(fake, main, budget_stop_wait=30)
        stopper.join(5)
        self.assertEqual(code, ExitCode.FENCED)
        self.assertEqual(exits, [ExitCode.FENCED])
        self.assertLess(time.monotonic() - started, 20)
        self.assertGreaterEqual(sum(1 for p in fake.patches[writes_before:] if heartbeat_only(p)), 1)

    def test_run_agent_exits_as_failed_when_no_operator_stops_the_run(self) -> None:
        fake = self.fake(None, {"budget": {"tokens": 100}})

        def main(sandbox: Sandbox) -> None:
            sandbox.record_usage(input_tokens=100)
            sandbox.tool("t", {}, lambda a, c: 1)

        code, _ = self.run_agent(fake, main, budget_stop_wait=0.5)
        self.assertEqual(code, ExitCode.FAILED)
        self.assertEqual(fake.status["heartbeat"]["usage"]["inputTokens"], 100)


if __name__ == "__main__":
    unittest.main()
