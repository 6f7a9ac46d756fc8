"""agent_watchdog: the Python sandbox SDK of agent-watchdog, standard library only.

What agent code running in a sandbox pod uses to report to its AgentRun, with the same protocol
and behaviour as the TypeScript SDK (@agent-watchdog/sandbox, operator/sandbox/):

    from agent_watchdog import run_agent

    def main(sandbox):
        found = sandbox.tool("search", {"q": "..."}, search, idempotent=True)
        sandbox.save_checkpoint(1, {"found": found.value})
        sandbox.record_usage(input_tokens=1200, output_tokens=300, model="gpt-5")
        sandbox.say("Done.")

    run_agent(main)  # exit 0: the run is Completed; an exception: a code that says why

See sandbox.py for where each part of the protocol lives: heartbeats, tool-call records,
checkpoints, nudges, approvals, fencing, and usage against the run's budget.
"""

from .api_client import AbortSignal, ApiClient, ApiError, SandboxApi
from .approvals import PendingApproval
from .errors import (
    EXIT_CODES,
    SANDBOX_EXIT_CODES,
    ApprovalDeniedError,
    BudgetBreach,
    BudgetExhaustedError,
    CheckpointTooLargeError,
    ExitCode,
    FencedError,
    SandboxConfigError,
    ToolError,
    ToolFailure,
    ToolValidationError,
    UnconfirmedSideEffectError,
    ValidationIssue,
    describe_failure,
    exit_code_for,
)
from .keys import ARGS_HASH_LENGTH, args_hash, canonical_json, idempotency_key
from .kubeconfig import ClusterConfig, KubeConfigError, in_cluster_config, load_config, load_kubeconfig, parse_yaml
from .log import JsonLogger, SandboxLogger, StdlibLogger
from .protocol import (
    SANDBOX_ENV,
    SANDBOX_FIELD_MANAGER,
    ApprovalOutcome,
    Nudge,
    SandboxIdentity,
    identity_from_env,
)
from .runner import run_agent
from .sandbox import ResumedApproval, Sandbox, SandboxStats, StreamHandle
from .tool_runner import ToolContext, ToolOutcome
from .transcript import TranscriptEntry
from .usage import Spending

__version__ = "0.1.0"

__all__ = [
    "ARGS_HASH_LENGTH",
    "EXIT_CODES",
    "SANDBOX_ENV",
    "SANDBOX_EXIT_CODES",
    "SANDBOX_FIELD_MANAGER",
    "AbortSignal",
    "ApiClient",
    "ApiError",
    "ApprovalDeniedError",
    "ApprovalOutcome",
    "BudgetBreach",
    "BudgetExhaustedError",
    "CheckpointTooLargeError",
    "ClusterConfig",
    "ExitCode",
    "FencedError",
    "JsonLogger",
    "KubeConfigError",
    "Nudge",
    "PendingApproval",
    "ResumedApproval",
    "Sandbox",
    "SandboxApi",
    "SandboxConfigError",
    "SandboxIdentity",
    "SandboxLogger",
    "SandboxStats",
    "Spending",
    "StdlibLogger",
    "StreamHandle",
    "ToolContext",
    "ToolError",
    "ToolFailure",
    "ToolOutcome",
    "ToolValidationError",
    "TranscriptEntry",
    "UnconfirmedSideEffectError",
    "ValidationIssue",
    "args_hash",
    "canonical_json",
    "describe_failure",
    "exit_code_for",
    "identity_from_env",
    "idempotency_key",
    "in_cluster_config",
    "load_config",
    "load_kubeconfig",
    "parse_yaml",
    "run_agent",
]
