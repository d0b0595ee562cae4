"""The session carried in the OpenTelemetry context.

Kept in the OpenTelemetry context (not a bare contextvar) so it follows the
span context everywhere the context goes: asyncio tasks, and thread pools
that run work under ``contextvars.copy_context()``.
"""

from __future__ import annotations

from dataclasses import dataclass

from opentelemetry import context

SESSION_KEY = context.create_key("agentguard-session")


@dataclass(frozen=True, slots=True)
class SessionContext:
    session_id: str
    profile: str | None = None
    task_type: str | None = None


def with_session(session: SessionContext, parent: context.Context | None = None) -> context.Context:
    return context.set_value(SESSION_KEY, session, parent)
