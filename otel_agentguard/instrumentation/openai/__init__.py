"""OpenAI SDK instrumentation: model calls as judged GenAI ``chat`` spans.

Instruments ``chat.completions.create`` and ``responses.create``, sync and
async, plain and streaming (``stream=True`` and the ``.stream()`` helpers,
which call ``create``), including ``with_raw_response``. Each call is a
``chat {model}`` span with ``gen_ai.provider.name = openai``, the request
model and numbers, the response model and id, token usage, finish reasons,
``agentguard.response.tool_calls`` (how many tool calls the response asked
for) and, for a final answer, ``agentguard.final.claims``: the claim
categories found in the answer text, in process. Prompts and answers go on
the span only with ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``.

A stream's span ends exactly once: when it is exhausted, closed, left through
its ``with`` block, or garbage-collected.

When another instrumentation (the official ``openai-v2``, OpenLLMetry) has a
model span open around the same call, no second span is made: that span is
enriched with the agentguard attributes, and the judge counts one model step.

In enforce mode, each call is a cut point: a due stop raises
``AgentStopped`` before the request, a refused answer (fake completion)
raises instead of being returned, and with ``budget_note = true`` in the
policy a remaining-budget note is added to the prompt. Opt-in history repair
(``OpenAIInstrumentor().instrument(repair_history=True)``) fixes unpaired tool
calls before each request and records ``agentguard.history.repaired``.

Turn it off with ``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS=agentguard_openai``
or ``OpenAIInstrumentor().uninstrument()``.
"""

from __future__ import annotations

from otel_agentguard.instrumentation._base import GuardInstrumentor, PatchTarget
from otel_agentguard.instrumentation.openai._wrappers import CHAT, RESPONSES, async_create_wrapper, create_wrapper
from otel_agentguard.instrumentation.openai.package import _instruments

_CHAT_MODULE = "openai.resources.chat.completions.completions"
_RESPONSES_MODULE = "openai.resources.responses.responses"


class OpenAIInstrumentor(GuardInstrumentor):
    instruments = _instruments
    targets = (
        PatchTarget(_CHAT_MODULE, "Completions.create", create_wrapper(CHAT)),
        PatchTarget(_CHAT_MODULE, "AsyncCompletions.create", async_create_wrapper(CHAT)),
        PatchTarget(_RESPONSES_MODULE, "Responses.create", create_wrapper(RESPONSES)),
        PatchTarget(_RESPONSES_MODULE, "AsyncResponses.create", async_create_wrapper(RESPONSES)),
    )


__all__ = ["OpenAIInstrumentor"]
