"""example_agent.py end to end: in process, and as a process configured only by its environment
(the sandbox env vars and AGENT_WATCHDOG_KUBECONFIG_JSON), as it runs in a pod."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

from agent_watchdog import ApiClient, ClusterConfig, JsonLogger, SandboxIdentity, args_hash, idempotency_key, run_agent

from fake_apiserver import FakeApiServer

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(os.path.dirname(HERE), "example_agent.py")
GOAL = "summarise the incident of last night"


class ExampleAgentTest(unittest.TestCase):
    def setUp(self) -> None:
        self.dir = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.dir, True)

    def fake(self, status: dict | None = None) -> FakeApiServer:
        fake = FakeApiServer(status, {"goal": GOAL}).start()
        self.addCleanup(fake.stop)
        return fake

    def process(self, fake: FakeApiServer, attempt: int = 1, **extra: str) -> subprocess.CompletedProcess[str]:
        kubeconfig = {
            "clusters": [{"name": "fake", "cluster": {"server": fake.url}}],
            "users": [{"name": "sandbox", "user": {"token": "t"}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "sandbox"}}],
            "current-context": "fake",
        }
        env = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": self.dir,
            "WATCHDOG_RUN_NAME": "r",
            "WATCHDOG_RUN_NAMESPACE": "ns",
            "WATCHDOG_ATTEMPT": str(attempt),
            "AGENT_WATCHDOG_KUBECONFIG_JSON": json.dumps(kubeconfig),
            "EXAMPLE_REPORT_DIR": self.dir,
            "PYTHONDONTWRITEBYTECODE": "1",
            **extra,
        }
        return subprocess.run([sys.executable, EXAMPLE], env=env, capture_output=True, text=True, timeout=60)

    def test_in_process(self) -> None:
        sys.path.insert(0, os.path.dirname(EXAMPLE))
        try:
            import example_agent
        finally:
            sys.path.remove(os.path.dirname(EXAMPLE))
        fake = self.fake()
        client = ApiClient(ClusterConfig(server=fake.url, source="test"))
        self.addCleanup(client.close)
        exits: list[int] = []
        os.environ["EXAMPLE_REPORT_DIR"] = self.dir
        try:
            code = run_agent(example_agent.main, client=client, identity=SandboxIdentity("r", "ns", 1), logger=JsonLogger("silent"), exit=exits.append)
        finally:
            del os.environ["EXAMPLE_REPORT_DIR"]
        self.assertEqual((code, exits), (0, [0]))
        status = fake.status
        self.assertEqual(status["checkpoint"], {"step": 2, "data": {"lines": ["the goal has 6 words"]}})
        self.assertEqual([(c["name"], c["state"]) for c in status["toolCalls"]], [("count_words", "Succeeded"), ("write_report", "Succeeded")])
        self.assertEqual(status["heartbeat"]["activity"]["kind"], "text")
        with open(os.path.join(self.dir, "report.txt")) as f:
            self.assertEqual(f.read(), f"{status['toolCalls'][1]['idempotencyKey']} the goal has 6 words\n")

    def test_as_a_process_configured_by_its_environment(self) -> None:
        fake = self.fake()
        done = self.process(fake)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual(fake.status["checkpoint"]["step"], 2)
        self.assertTrue(all(h.get("Authorization") == "Bearer t" for _, _, _, h in fake.requests))
        logs = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
        started = next(r for r in logs if r["msg"] == "sandbox started")
        self.assertEqual((started["level"], started["logger"], started["run"], started["namespace"], started["attempt"]), ("info", "sandbox", "r", "ns", 1))
        self.assertIn("agent completed", [r["msg"] for r in logs])

    def test_a_new_attempt_refuses_to_write_the_report_twice(self) -> None:
        # Attempt 1 committed step 1, recorded write_report Started, and died.
        lines = ["the goal has 6 words"]
        key = idempotency_key("uid-r", 2, 0, "write_report", args_hash({"lines": lines}))
        started = {"id": "a1-2", "name": "write_report", "argsHash": args_hash({"lines": lines}), "idempotencyKey": key, "idempotent": False, "attempt": 1, "state": "Started"}
        fake = self.fake({"attempt": 2, "checkpoint": {"step": 1, "data": {"lines": lines}}, "toolCalls": [started]})
        done = self.process(fake, attempt=2)
        self.assertEqual(done.returncode, 3, done.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "report.txt")))

    def test_rate_limited_it_exits_6_after_the_429_and_a_later_attempt_completes(self) -> None:
        fake = self.fake()
        one = self.process(fake, EXAMPLE_BEHAVIOUR="rate-limited", EXAMPLE_RETRY_AFTER_SECONDS="2")
        self.assertEqual(one.returncode, 6, one.stderr)
        [call] = fake.status["toolCalls"]
        self.assertEqual((call["name"], call["state"], call["error"]["httpStatus"], call["error"]["retryAfterSeconds"]), ("call_model", "Failed", 429, 2))
        fake.operator({"attempt": 2, "phase": "Starting"})
        two = self.process(fake, attempt=2, EXAMPLE_BEHAVIOUR="rate-limited")
        self.assertEqual(two.returncode, 0, two.stderr)
        self.assertEqual(fake.status["heartbeat"]["activity"]["kind"], "text")

    def test_outside_a_sandbox_it_exits_2(self) -> None:
        done = subprocess.run([sys.executable, EXAMPLE], env={"PATH": os.environ.get("PATH", ""), "HOME": self.dir, "PYTHONDONTWRITEBYTECODE": "1"}, capture_output=True, text=True, timeout=60)
        self.assertEqual(done.returncode, 2)
        self.assertIn("not in a sandbox pod", done.stderr)


if __name__ == "__main__":
    unittest.main()
