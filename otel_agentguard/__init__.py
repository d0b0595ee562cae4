"""otel_agentguard: OpenTelemetry stall probes for LLM agents.

::

    import otel_agentguard as ag

    ag.install()                                   # add the guard to the SDK provider
    with ag.session("sess-42", agent_name="support"):
        run_agent()                                # tool and model spans are judged live

See docs/README.md for the policy file, the replay CLI and the dashboards.
"""

from otel_agentguard.errors import AgentStopped
from otel_agentguard.guard import install
from otel_agentguard.history import RepairReport, history_problems, repair_history
from otel_agentguard.interrupts import drain_on_sigterm, request_stop
from otel_agentguard.judge.policy import Policy, PolicyError, Profile, load_policy, parse_policy
from otel_agentguard.judge.probes import Alert
from otel_agentguard.judge.session_judge import SessionJudge, Verdict
from otel_agentguard.judge.steps import Step
from otel_agentguard.live.processor import AgentGuardSpanProcessor
from otel_agentguard.session import session
from otel_agentguard.tool import tool
from otel_agentguard.version import __version__

__all__ = [
    "AgentGuardSpanProcessor",
    "AgentStopped",
    "Alert",
    "Policy",
    "PolicyError",
    "Profile",
    "RepairReport",
    "SessionJudge",
    "Step",
    "Verdict",
    "__version__",
    "drain_on_sigterm",
    "history_problems",
    "install",
    "load_policy",
    "parse_policy",
    "repair_history",
    "request_stop",
    "session",
    "tool",
]
