"""otel_agentguard: OpenTelemetry stall probes for LLM agents.

::

    import otel_agentguard as ag

    ag.install()                                   # add the guard to the SDK provider
    with ag.session("sess-42", agent_name="support"):
        run_agent()                                # tool and model spans are judged live

See the README for the policy file, the replay CLI and the dashboards.
"""

from otel_agentguard.guard import install
from otel_agentguard.judge import SessionJudge, Verdict
from otel_agentguard.policy import Policy, PolicyError, Profile, load_policy, parse_policy
from otel_agentguard.probes import Alert
from otel_agentguard.processor import AgentGuardSpanProcessor
from otel_agentguard.session import session
from otel_agentguard.steps import Step
from otel_agentguard.tool import tool
from otel_agentguard.version import __version__

__all__ = [
    "AgentGuardSpanProcessor",
    "Alert",
    "Policy",
    "PolicyError",
    "Profile",
    "SessionJudge",
    "Step",
    "Verdict",
    "__version__",
    "install",
    "load_policy",
    "parse_policy",
    "session",
    "tool",
]
