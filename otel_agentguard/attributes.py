"""Every name other people's code, dashboards and alert rules depend on, once.

The ``agentguard.*`` names are this package's public contract (docs/operations.md lists them);
the ``gen_ai.*`` names are the OpenTelemetry GenAI semantic conventions we read
and write. Nothing else in the package spells these strings.
"""

from __future__ import annotations

# --- agentguard span attributes -------------------------------------------
SESSION_ID = "agentguard.session.id"
SEQUENCE = "agentguard.sequence"
TOOL_ARGS_FINGERPRINT = "agentguard.tool.args.fingerprint"
TOOL_ARGS_KEYS = "agentguard.tool.args.keys"
TOOL_ARGS_SIZE = "agentguard.tool.args.size"
# The arguments held a value the guard does not read (an arbitrary object): the fingerprint is
# unique to the call, so the step never counts as a repeat.
TOOL_ARGS_OPAQUE = "agentguard.tool.args.opaque"
# How many argument keys were not exported: **kwargs keys, or keys that are not plain names.
TOOL_ARGS_UNDECLARED_KEYS = "agentguard.tool.args.undeclared_keys"
TOOL_RESULT_FINGERPRINT = "agentguard.tool.result.fingerprint"
# True when the tool returned nothing useful (None, "", [], {} or a mapping of
# only empty values). Lets error_streak judge results without their content.
TOOL_RESULT_EMPTY = "agentguard.tool.result.empty"
TOOL_EFFECT = "agentguard.tool.effect"
# On a tool span the guard answered itself (enforce mode): the probe whose stall it would repeat.
INTERVENTION = "agentguard.intervention"
FINAL_CLAIMS = "agentguard.final.claims"
# Why the final answer is a claim, without its text: the deciding rule ("first_person",
# "impersonal", "completion_marker" ...) and the 1-based position of the deciding clause.
FINAL_CLAIM_RULE = "agentguard.final.claim.rule"
FINAL_CLAIM_CLAUSE = "agentguard.final.claim.clause"
# False when the answer is in a language the claim rules do not read (its claims were not checked).
FINAL_CLAIMS_CHECKED = "agentguard.final.claims.checked"
# True when the claim rules decided the answer by inference (who acted, when) and the policy's
# model judge decides it instead, at the session's end (only set with a judge configured).
FINAL_CLAIMS_BORDERLINE = "agentguard.final.claims.borderline"
# On a session span: how many of its final answers the claim rules could not read.
CLAIMS_UNCHECKED = "agentguard.claims.unchecked"
# The label of agentguard.final_answers: whether the claim rules read the answer.
CLAIMS_CHECKED = "agentguard.claims.checked"
# Number of tool calls a model response asked for (feeds the tool-call balance).
RESPONSE_TOOL_CALLS = "agentguard.response.tool_calls"
# Set on a step span that runs inside another span of the same step (two instrumentations
# of one model call; an MCP server's span of the client's tool call): the enclosing span is
# the step, this one is not.
NESTED_STEP = "agentguard.step.nested"
# On a model span: how the answer repeats itself, as a small JSON object without text
# (chunk count, most copies in a row, most repeated characters, and the first finding with
# its character offsets); enough for a replay to reach the live verdict.
OUTPUT_REPETITION = "agentguard.output.repetition"
# True on a model span whose stream was garbage-collected before its end, never closed: the
# call ended with what the application had read (a partial answer is no final answer).
STREAM_ABANDONED = "agentguard.stream.abandoned"
# On a model span: how many repairs the opt-in history middleware made to the request.
HISTORY_REPAIRED = "agentguard.history.repaired"
STOP_REASON = "agentguard.stop_reason"
# True on a session span when the guard (enforce mode) or an interrupt ended the turn.
ENFORCED = "agentguard.enforced"
PROFILE = "agentguard.profile"
POLICY_VERSION = "agentguard.policy.version"
MODE = "agentguard.mode"
TASK_TYPE = "agentguard.task_type"
STEPS = "agentguard.steps"
TOKENS = "agentguard.tokens"
COST_USD = "agentguard.cost.usd"
# Marks the short span that carries a verdict when no session span is open.
VERDICT = "agentguard.verdict"
# On a verdict ``agentguard serve`` wrote again for a session whose trace got spans after it was judged.
VERDICT_AMENDED = "agentguard.verdict.amended"

# --- the stall event --------------------------------------------------------
STALL_EVENT = "agentguard.stall"
PROBE = "agentguard.probe"
EVIDENCE = "agentguard.evidence"
DETAIL = "agentguard.detail"
DISPOSAL = "agentguard.disposal"
BUDGET_KIND = "agentguard.budget.kind"
# On an output_repetition stall: character offsets in the answer of the first and the triggering repetition.
REPETITION_OFFSETS = "agentguard.output.repetition.offsets"

# --- probe names -------------------------------------------------------------
TOOL_LOOP = "tool_loop"
CYCLE = "cycle"
NO_PROGRESS = "no_progress"
ERROR_STREAK = "error_streak"
BUDGET_EXCEEDED = "budget_exceeded"
FAKE_COMPLETION = "fake_completion"
OUTPUT_REPETITION_PROBE = "output_repetition"
HANDOFF_LOOP = "handoff_loop"
PROBE_NAMES = (TOOL_LOOP, CYCLE, NO_PROGRESS, ERROR_STREAK, BUDGET_EXCEEDED, FAKE_COMPLETION, OUTPUT_REPETITION_PROBE,
               HANDOFF_LOOP)

BUDGET_KINDS = ("steps", "tokens", "cost", "wall_time", "model_calls")

# --- stop reasons ---------------------------------------------------------------
COMPLETED = "completed"
EXPLICIT_FINISH = "explicit_finish"
STEERED = "steered"
DRAINED = "drained"
DISPATCHED = "dispatched"
AWAITING = "awaiting"
ERROR = "error"
ABANDONED = "abandoned"
INTERRUPTS = (STEERED, DRAINED, DISPATCHED, AWAITING)
STOP_REASONS = (COMPLETED, EXPLICIT_FINISH, *PROBE_NAMES, *INTERRUPTS, ERROR, ABANDONED)

# --- metrics -----------------------------------------------------------------------
METRIC_SESSIONS = "agentguard.sessions"
METRIC_STALLS = "agentguard.stalls"
METRIC_SESSION_STEPS = "agentguard.session.steps"
METRIC_SESSION_TOKENS = "agentguard.session.tokens"
METRIC_SESSION_DURATION = "agentguard.session.duration"
METRIC_INTERNAL_ERRORS = "agentguard.internal_errors"
METRIC_FINAL_ANSWERS = "agentguard.final_answers"

# --- GenAI semantic conventions we read and write ---------------------------------
GEN_AI_OPERATION_NAME = "gen_ai.operation.name"
GEN_AI_CONVERSATION_ID = "gen_ai.conversation.id"
GEN_AI_AGENT_NAME = "gen_ai.agent.name"
GEN_AI_TOOL_NAME = "gen_ai.tool.name"
GEN_AI_TOOL_CALL_ID = "gen_ai.tool.call.id"
GEN_AI_TOOL_CALL_ARGUMENTS = "gen_ai.tool.call.arguments"
GEN_AI_TOOL_CALL_RESULT = "gen_ai.tool.call.result"
GEN_AI_REQUEST_MODEL = "gen_ai.request.model"
GEN_AI_RESPONSE_MODEL = "gen_ai.response.model"
GEN_AI_RESPONSE_FINISH_REASONS = "gen_ai.response.finish_reasons"
GEN_AI_RESPONSE_ID = "gen_ai.response.id"
GEN_AI_USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
GEN_AI_OUTPUT_MESSAGES = "gen_ai.output.messages"
GEN_AI_INPUT_MESSAGES = "gen_ai.input.messages"
GEN_AI_PROVIDER_NAME = "gen_ai.provider.name"
ERROR_TYPE = "error.type"
SESSION_ID_SEMCONV = "session.id"

OP_EXECUTE_TOOL = "execute_tool"
OP_INVOKE_AGENT = "invoke_agent"
# Inference operations: a span with one of these is a model step.
INFERENCE_OPERATIONS = frozenset(
    {"chat", "text_completion", "generate_content", "completion", "responses"}
)

# Older or vendor spellings we still read from foreign spans.
LEGACY_INPUT_TOKENS = ("gen_ai.usage.prompt_tokens", "llm.token_count.prompt")
LEGACY_OUTPUT_TOKENS = ("gen_ai.usage.completion_tokens", "llm.token_count.completion")
# OpenLLMetry (Traceloop SDK) stamps association properties on every span; this one names the session.
TRACELOOP_SESSION_ID = "traceloop.association.properties.session_id"
