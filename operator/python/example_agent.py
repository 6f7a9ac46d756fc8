"""An example agent on the Python sandbox SDK: one idempotent tool call, a checkpoint, one
non-idempotent tool call keyed for the service behind it, a second checkpoint, and its final text.

Run it as the agent container of an AgentRun (the operator sets WATCHDOG_RUN_NAME,
WATCHDOG_RUN_NAMESPACE and WATCHDOG_ATTEMPT and mounts the pod's service-account token):

    command: ["python3", "example_agent.py"]

or, outside a cluster, with those three variables and KUBECONFIG set. It writes its report into
$EXAMPLE_REPORT_DIR (default: the temporary directory). Exit 0 completes the run; see
agent_watchdog.ExitCode for the other codes.

With EXAMPLE_BEHAVIOUR=rate-limited it plays the TypeScript example agent's behaviour of that name
instead: its model call fails with HTTP 429 and Retry-After ($EXAMPLE_RETRY_AFTER_SECONDS, 5) on
attempt 1 and it gives up, so run_agent exits 6 (rate limited) and the watchdog requeues the run
with the rate-limit backoff, without spending a restart; a later attempt gets through.
"""

from __future__ import annotations

import os
import sys
import tempfile
from typing import Any

try:
    from agent_watchdog import Sandbox, ToolContext, ToolError, run_agent
except ImportError:  # run from a clone: the package is beside this file
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from agent_watchdog import Sandbox, ToolContext, ToolError, run_agent


def count_words(args: dict[str, str], ctx: ToolContext) -> int:
    return len(args["text"].split())


def write_report(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    if ctx.signal.aborted:
        raise ToolError("stopped before writing")
    path = os.path.join(os.environ.get("EXAMPLE_REPORT_DIR") or tempfile.gettempdir(), "report.txt")
    # The key is the same on every attempt: a service given it can recognise a repeated request.
    with open(path, "a", encoding="utf-8") as f:
        f.write(f"{ctx.idempotency_key} {' | '.join(args['lines'])}\n")
    return {"file": path, "lines": len(args["lines"])}


def call_model(args: dict[str, str], ctx: ToolContext) -> dict[str, str]:
    # The fake model API is busy on the first attempt only.
    if ctx.attempt == 1:
        raise ToolError("429 Too Many Requests", http_status=429, retry_after_seconds=float(os.environ.get("EXAMPLE_RETRY_AFTER_SECONDS") or 5))
    return {"text": "The model answered."}


def rate_limited(sandbox: Sandbox) -> None:
    answer = sandbox.tool("call_model", {"prompt": sandbox.goal or ""}, call_model, idempotent=True)
    if not answer.ok or answer.value is None:
        # Giving up right after a 429: run_agent exits 6, and the watchdog waits out the rate limit.
        raise RuntimeError(f"giving up this attempt: {answer.error.message if answer.error else 'no answer'}")
    sandbox.say(answer.value["text"])


def main(sandbox: Sandbox) -> None:
    if os.environ.get("EXAMPLE_BEHAVIOUR") == "rate-limited":
        rate_limited(sandbox)
        return
    # A new attempt resumes from the last committed checkpoint.
    resumed = sandbox.load_checkpoint() or {"step": 0}
    if sandbox.last_failure:
        print(f"the last attempt ended: {sandbox.last_failure.get('reason')}", file=sys.stderr)
    lines: list[str] = (resumed.get("data") or {}).get("lines", [])

    if resumed["step"] < 1:
        words = sandbox.tool("count_words", {"text": sandbox.goal or ""}, count_words, idempotent=True)
        if not words.ok:
            raise RuntimeError(words.error.message if words.error else "count_words failed")
        lines = [f"the goal has {words.value} words"]
        sandbox.save_checkpoint(1, {"lines": lines})

    if resumed["step"] < 2:
        # Not idempotent: if an attempt dies while it runs, it is never run again blindly
        # (the next attempt exits 3 and the run waits for a person).
        report = sandbox.tool("write_report", {"lines": lines}, write_report)
        if not report.ok:
            raise RuntimeError(report.error.message if report.error else "write_report failed")
        sandbox.save_checkpoint(2, {"lines": lines})

    sandbox.say(f"Done: {'; '.join(lines)}.")


if __name__ == "__main__":
    run_agent(main)  # returns: exit 0 and the run is Completed; raises: a code that says why
