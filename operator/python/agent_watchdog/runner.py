"""Runs an agent's main function under the protocol and turns its end into the pod's exit code
(runner.ts), which is the final word on the run: 0 completes it, anything else is a crash the
watchdog handles, but for the codes that say why: 3 (an unconfirmed side effect) stops it for a
person, and 6 (the agent gave up on a rate limit) requeues it with the rate-limit backoff.

Aborting a fenced agent. The TypeScript SDK aborts an AbortSignal and relies on the agent's next
``await`` of the SDK to throw. A Python agent blocked in its own code would carry on, so, besides
the signal and FencedError from every further SDK call, ``run_agent`` raises FencedError into the
agent's thread (CPython's ``PyThreadState_SetAsyncExc``, through ctypes) when a fence arrives
while that thread runs the agent's own code, including a tool's function. It takes effect at the
thread's next Python instruction: a call blocked in C (a socket read, ``time.sleep``) finishes
first, which is why tools should wait on ``ctx.signal.wait(seconds)`` rather than sleep. It is
never raised into the SDK's own waits (they end with FencedError by themselves), nor after the
agent's work has ended or an SDK call has already raised the error that ends it (an approval
denied, an unconfirmed side effect), so the exit code stays the one that says why. Pass
``interrupt_on_fence=False`` to rely on the signal alone.
"""

from __future__ import annotations

import ctypes
import sys
import threading
from collections.abc import Callable
from typing import Any, Optional

from .errors import ExitCode, FencedError, exit_code_for, is_budget_exhausted
from .protocol import newest_call_rate_limited
from .sandbox import Sandbox

__all__ = ["run_agent"]

#: The operator stops a run whose report reaches a limit within moments; an agent that stopped on
#: its budget waits that long for it, so that the run ends as BudgetExhausted and not as a crash
#: (which would spend a restart first). An operator that does not stop it (one without budgets, or
#: one that prices the usage differently) gets the crash after this wait.
BUDGET_STOP_WAIT_S = 30.0


def _raise_in_thread(ident: int, reason: str) -> bool:
    class AgentFenced(FencedError):
        def __init__(self) -> None:
            super().__init__(reason)

    AgentFenced.__name__ = AgentFenced.__qualname__ = "FencedError"
    try:
        set_async_exc = ctypes.pythonapi.PyThreadState_SetAsyncExc
    except AttributeError:  # not CPython
        return False
    set_async_exc.argtypes = [ctypes.c_ulong, ctypes.py_object]
    return int(set_async_exc(ident, AgentFenced)) == 1


def run_agent(
    main: Callable[[Sandbox], Any],
    *,
    exit: Optional[Callable[[int], None]] = None,
    interrupt_on_fence: bool = True,
    budget_stop_wait: float = BUDGET_STOP_WAIT_S,
    **options: Any,
) -> int:
    """Starts a sandbox, runs ``main(sandbox)`` and exits: 0 when ``main`` returns, non-zero when
    it raises (3 for an unconfirmed side effect, 4 when fenced, 5 when an approval was denied, 6
    when it gave up on a rate limit, 2 when the environment names no run, 1 otherwise). ``options`` are those of
    :meth:`Sandbox.start`. ``exit`` defaults to ``sys.exit``; with one that returns, the exit code
    is returned. An agent that stopped on its budget (BudgetExhaustedError) first waits, at most
    ``budget_stop_wait`` seconds, for the operator to stop the run, and then exits as fenced."""
    end = exit if exit is not None else sys.exit
    try:
        sandbox = Sandbox.start(exit=end, **options)
    except Exception as err:  # noqa: BLE001
        code = exit_code_for(err)
        sys.stderr.write(f"sandbox could not start: {err}\n")
        end(code)
        return code

    agent_thread = threading.get_ident()
    state = {"running": True}
    state_lock = threading.Lock()

    def on_fenced(reason: str) -> None:
        if not interrupt_on_fence:
            return
        with state_lock, sandbox._sdk_lock:  # noqa: SLF001 - the SDK's own bookkeeping
            if state["running"] and sandbox._interruptible(agent_thread):  # noqa: SLF001
                _raise_in_thread(agent_thread, reason)

    remove = sandbox.on_fenced(on_fenced)
    failure: Optional[BaseException] = None
    try:
        try:
            main(sandbox)
        finally:
            with state_lock:
                state["running"] = False
            remove()
    except SystemExit as err:
        # sys.exit() inside the agent: 0 (or None) is the work done, anything else a failure.
        if err.code not in (None, 0):
            failure = err
    except BaseException as err:  # noqa: BLE001 - whatever ends the agent decides the exit code
        failure = err
    try:
        if failure is None:
            code = int(ExitCode.FENCED if sandbox.fenced else ExitCode.COMPLETED)
            sandbox.complete()
            return code
        if is_budget_exhausted(failure) and not sandbox.fenced:
            sandbox.wait_for_stop(budget_stop_wait)
        code = exit_code_for(failure)
        if isinstance(failure, SystemExit):
            code = failure.code if isinstance(failure.code, int) else ExitCode.FAILED
        # Agent code that stops on the signal raises its own errors; fencing is still the cause.
        if code == ExitCode.FAILED and sandbox.fenced:
            code = ExitCode.FENCED
        # Giving up right after a rate-limited call is giving up on the rate limit, whatever the
        # agent raised: the watchdog then waits out the rate-limit backoff instead of a restart's.
        elif code == ExitCode.FAILED and not isinstance(failure, SystemExit) and newest_call_rate_limited(sandbox.calls, sandbox.attempt):
            code = ExitCode.RATE_LIMITED
        sandbox.fail(failure, code)
        return int(code)
    except FencedError:
        # A fence raised into this thread just as main ended: it is the cause now.
        sandbox.close()
        end(ExitCode.FENCED)
        return int(ExitCode.FENCED)
