"""The Python half of the shared SDK protocol suite (test/integration/sdk-protocol.test.ts): an
agent that plays a script of SDK calls, the same script the TypeScript driver (driver.ts) plays,
and writes what the SDK answered as JSON lines into $PROTOCOL_EVENTS. It runs as a sandbox would:
its identity from WATCHDOG_*, its credentials from $KUBECONFIG, its end as the exit code."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "operator", "python"))

from agent_watchdog import CheckpointTooLargeError, Sandbox, ToolContext, ToolError, run_agent  # noqa: E402

SCRIPT: list[dict[str, Any]] = json.loads(os.environ.get("PROTOCOL_SCRIPT", "[]"))


def event(record: dict[str, Any]) -> None:
    with open(os.environ["PROTOCOL_EVENTS"], "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")


def run_tool(step: dict[str, Any], ctx: ToolContext) -> Any:
    hold = step.get("holdFile")
    while hold is not None and not os.path.exists(hold):
        ctx.progress()
        if ctx.signal.wait(0.05):
            raise ToolError("stopped while holding")
    with open(os.environ["SIDE_EFFECTS_FILE"], "a", encoding="utf-8") as f:
        f.write(f"{step['name']} {ctx.idempotency_key}\n")
    if step.get("fail") is not None:
        raise ToolError(step["fail"], http_status=step.get("httpStatus"), retry_after_seconds=step.get("retryAfterSeconds"))
    return step.get("result")


def play(sandbox: Sandbox, step: dict[str, Any]) -> None:
    kind = step["do"]
    if kind == "say":
        sandbox.say(step["text"])
    elif kind == "stream":
        stream = sandbox.begin_stream()
        for chunk in step["chunks"]:
            stream.chunk(chunk)
        stream.end()
    elif kind == "tool":
        outcome = sandbox.tool(step["name"], step["args"], lambda _args, ctx: run_tool(step, ctx), idempotent=step.get("idempotent", False))
        if outcome.ok:
            event({"event": "tool", "ok": True, "replayed": outcome.replayed, "value": outcome.value, "key": outcome.idempotency_key})
        else:
            event({"event": "tool", "ok": False, "error": outcome.error.message if outcome.error else None, "key": outcome.idempotency_key})
    elif kind == "checkpoint":
        # padding: data of that many characters, made here (an env var holds at most 128 KiB)
        data = step.get("data") if step.get("padding") is None else "x" * step["padding"]
        try:
            sandbox.save_checkpoint(step["step"], data)
        except CheckpointTooLargeError as err:
            event({"event": "checkpoint", "ok": False, "error": type(err).__name__, "bytes": err.size, "limit": err.limit})
    elif kind == "nudge":
        nudge = sandbox.next_nudge()
        event({"event": "nudge", "message": nudge.message, "count": nudge.count})
    elif kind == "approval":
        event({"event": "approval", "answer": sandbox.await_approval(step["question"])})
    elif kind == "giveUp":
        raise RuntimeError(step["message"])
    elif kind == "crash":
        os._exit(1)
    else:
        raise ValueError(f"unknown step {kind}")


def main(sandbox: Sandbox) -> None:
    failure = sandbox.last_failure
    event(
        {
            "event": "start",
            "attempt": sandbox.attempt,
            "goal": sandbox.goal,
            "checkpoint": sandbox.load_checkpoint(),
            "lastFailure": failure.get("reason") if isinstance(failure, dict) else None,
        }
    )
    for step in SCRIPT:
        play(sandbox, step)


if __name__ == "__main__":
    run_agent(main)
