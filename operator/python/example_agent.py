"""An example agent on the Python sandbox SDK: one idempotent tool call, a checkpoint, one
non-idempotent tool call keyed for the service behind it, a second checkpoint, and its final text.

Run it as the agent container of an AgentRun (the operator sets WATCHDOG_RUN_NAME,
WATCHDOG_RUN_NAMESPACE and WATCHDOG_ATTEMPT and mounts the pod's service-account token):

    command: ["python3", "example_agent.py"]

or, outside a cluster, with those three variables and KUBECONFIG set. It writes its report into
$EXAMPLE_REPORT_DIR (default: the temporary directory). Exit 0 completes the run; see
agent_watchdog.ExitCode for the other codes.
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


def main(sandbox: Sandbox) -> None:
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
