"""Judge recorded sessions with the very judge the live processor uses."""

from __future__ import annotations

import os
from collections.abc import Iterable

from otel_agentguard.judge.claims import classifier_everywhere
from otel_agentguard.judge.policy import Policy
from otel_agentguard.judge.session_judge import SessionJudge, Verdict
from otel_agentguard.replay.recorded import RecordedSession
from otel_agentguard.replay.sources import read_files


def judge_recorded(session: RecordedSession, policy: Policy, profile: str | None = None) -> Verdict:
    """The verdict for one recorded session; ``profile`` overrides the session's own."""
    chosen = policy.resolve_profile(profile or session.profile, session.task_type)
    # A replay never stops a session: no breakpoint asks for the last actions.
    judge = SessionJudge(session.session_id, policy, chosen, start_ns=session.start_ns, last_actions=False)
    for step in session.steps:
        judge.observe(step)
    return judge.finish(error=session.error, interrupt=session.interrupt, end_ns=session.end_ns)


def replay_files(
    paths: Iterable[str | os.PathLike[str]], policy: Policy, profile: str | None = None
) -> list[tuple[RecordedSession, Verdict]]:
    """Read every file and judge every session in it (the policy's claim classifier may be waited for)."""
    with classifier_everywhere():
        return [(session, judge_recorded(session, policy, profile)) for session in read_files(paths, policy)]
