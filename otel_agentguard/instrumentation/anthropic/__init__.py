"""Anthropic SDK instrumentation: model calls as judged GenAI ``chat`` spans.

Instruments ``Messages.create`` and ``AsyncMessages.create`` (plain and
``stream=True``, also through ``with_raw_response``) and ``Messages.stream`` /
``AsyncMessages.stream`` (the stream managers: iterating the stream,
``text_stream``, ``get_final_message()`` and ``until_done()`` all keep
working). Each call is a ``chat {model}`` client span with
``gen_ai.operation.name = chat``, ``gen_ai.provider.name = anthropic``, the
request model and numbers (``max_tokens``, ``temperature``, ``top_p``,
``top_k``), the response model and id, token usage
(``gen_ai.usage.input_tokens`` counts cache reads and writes, as the GenAI
conventions ask), ``gen_ai.response.finish_reasons`` (the ``stop_reason``:
``end_turn``, ``tool_use``, ``max_tokens``, ...), ``agentguard.response.tool_calls``
(the number of ``tool_use`` blocks: the tool calls the agent now owes a
``tool_result``) and, for a final answer (``end_turn`` with no ``tool_use``),
``agentguard.final.claims``: the claim categories found in the answer text, in
process. Inside a guarded session every such span also gets
``agentguard.session.id`` and ``agentguard.sequence``.

Prompts, system instructions and answers go on the span
(``gen_ai.input.messages``, ``gen_ai.system_instructions``,
``gen_ai.output.messages``) only with
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``.

A streamed call's span ends exactly once: when the stream is exhausted,
closed, left through its ``with`` block, fails, or is garbage-collected. The
span of ``messages.stream`` starts when its ``with`` block is entered, which is
when the SDK sends the request.

The SDK's return values and exceptions are untouched: a failed call
(``anthropic.APIStatusError``, ``APIConnectionError``, ...) ends its span with
status ERROR and ``error.type``, and the SDK's own exception propagates.

Other spans of the same call: recent SDK releases emit their own
``anthropic.messages.create`` span; it runs inside ours and is counted once
by the judge, as is a call made inside another instrumentation's model span
(LangChain, OpenLLMetry), whose span is enriched instead of nested.

Turn it off with ``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS=agentguard_anthropic``
or ``AnthropicInstrumentor().uninstrument()``.
"""

from __future__ import annotations

from otel_agentguard.instrumentation._base import GuardInstrumentor, PatchTarget
from otel_agentguard.instrumentation.anthropic._wrappers import (
    async_messages_create,
    async_messages_stream,
    messages_create,
    messages_stream,
)
from otel_agentguard.instrumentation.anthropic.package import _instruments

# The package re-exports both classes; patching them there patches the one class object.
_MESSAGES_MODULE = "anthropic.resources.messages"


class AnthropicInstrumentor(GuardInstrumentor):
    """Traces ``messages.create`` and ``messages.stream``, sync and async, as judged model spans."""

    instruments = _instruments
    targets = (
        PatchTarget(_MESSAGES_MODULE, "Messages.create", messages_create),
        PatchTarget(_MESSAGES_MODULE, "AsyncMessages.create", async_messages_create),
        PatchTarget(_MESSAGES_MODULE, "Messages.stream", messages_stream),
        PatchTarget(_MESSAGES_MODULE, "AsyncMessages.stream", async_messages_stream),
    )


__all__ = ["AnthropicInstrumentor"]
