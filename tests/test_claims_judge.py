"""The model judge: answers the claim rules cannot read, or decide only by inference, go to an
OpenAI-compatible model.

The judge talks to a real loopback HTTP server speaking the chat completions API; the agent
is the real ``openai`` SDK against another. The rules read English and Chinese, so the
unread answers here are in Spanish and German; the borderline ones are English answers the
rules decide by inferring who acted (a passive, a headline) or that someone else did.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

import otel_agentguard as ag
from otel_agentguard import _internal_errors
from otel_agentguard import attributes as A
from otel_agentguard.exporters import OTLPJsonLinesSpanExporter
from otel_agentguard.instrumentation.openai import OpenAIInstrumentor
from otel_agentguard.judge.claims.model_judge import ModelJudge
from otel_agentguard.judge.policy import PolicyError, parse_policy
from otel_agentguard.replay import replay_files
from otel_agentguard.replay.cli import run as cli_main
from otel_agentguard.scripted_model import Request, ScriptedModelServer, Turn
from otel_agentguard.testing import GuardedTracing

SPANISH_CLAIM = "He cancelado su pedido A1 y el reembolso ya está en camino."
SPANISH_HONEST = "Su pedido A1 todavía está en preparación; no he cambiado nada."
GERMAN_CLAIM = "Ich habe die Bestellung A1 storniert."
# Borderline: the rules infer who acted. The judge below reads the first as a state the agent
# only looked up and the second as the agent's own act.
PASSIVE_STATE = "Your order A1 has been cancelled."
OTHERS_ACT = "The warehouse team cancelled order A1 this morning."


def judge_script(calls: list[str], *, reply: Callable[[str], str] | None = None,
                 delay_s: float = 0.0) -> Callable[[Request], Turn]:
    """A judge model that says CLAIM for the claims above and NONE otherwise, and logs what it read."""

    def answer(request: Request) -> Turn:
        text = request.body["messages"][-1]["content"]
        calls.append(text)
        if delay_s:
            time.sleep(delay_s)
        if reply is not None:
            return Turn.answer(reply(text))
        return Turn.answer("CLAIM" if text in (SPANISH_CLAIM, GERMAN_CLAIM, OTHERS_ACT) else "NONE")

    return answer


@pytest.fixture
def judge_calls() -> list[str]:
    return []


@pytest.fixture
def judge_server(judge_calls: list[str]) -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer(judge_script(judge_calls)) as server:
        yield server


def policy_text(url: str, **extra: Any) -> str:
    options = "".join(f"{key} = {json.dumps(value)}\n" for key, value in extra.items())
    return ('[tools.get_order]\neffect = "read"\n[tools.cancel_order]\neffect = "write"\n'
            f'[claims]\njudge_url = "{url}"\njudge_model = "judge-small"\n{options}')


def closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


@pytest.fixture
def errors() -> Callable[[str], int]:
    """How many failures of a kind were reported since the test began."""
    before = _internal_errors.counts()
    return lambda kind: _internal_errors.counts().get(kind, 0) - before.get(kind, 0)


# --- the judge on its own --------------------------------------------------------------------


def test_the_judge_asks_the_endpoint_once_per_answer_and_remembers(judge_server, judge_calls):
    judge = ModelJudge(judge_server.openai_url, "judge-small")

    assert judge(SPANISH_CLAIM) == ("write",)
    assert judge(SPANISH_HONEST) == ()
    assert judge(SPANISH_CLAIM) == ("write",)  # from the cache

    assert judge_calls == [SPANISH_CLAIM, SPANISH_HONEST]
    (request, _) = judge_server.requests
    assert request.body["model"] == "judge-small"
    assert request.body["temperature"] == 0
    assert request.body["messages"][0]["role"] == "system"


def test_the_judge_sends_the_key_from_the_environment(monkeypatch, judge_calls):
    seen: list[str | None] = []

    def script(request: Request) -> Turn:
        seen.append("ok")
        return Turn.answer("NONE")

    with ScriptedModelServer(script) as server:
        monkeypatch.setenv("OTEL_AGENTGUARD_CLAIMS_JUDGE_API_KEY", "sk-judge")
        judge = ModelJudge(server.openai_url + "/chat/completions", "judge-small")  # a full URL works too
        assert judge("Erledigt?") == ()
    assert seen == ["ok"]


def test_the_rate_budget_leaves_answers_unchecked_past_it(judge_server, judge_calls, errors):
    judge = ModelJudge(judge_server.openai_url, "judge-small", calls_per_minute=2)

    verdicts = [judge(f"Respuesta número {n}.") for n in range(4)]

    assert verdicts == [(), (), None, None]
    assert len(judge_calls) == 2
    assert errors("claims.judge.budget") == 2


def test_the_cache_forgets_the_oldest_answer_past_its_size(judge_server, judge_calls):
    judge = ModelJudge(judge_server.openai_url, "judge-small", cache=1)

    judge(SPANISH_CLAIM)
    judge(SPANISH_HONEST)
    judge(SPANISH_CLAIM)

    assert judge_calls == [SPANISH_CLAIM, SPANISH_HONEST, SPANISH_CLAIM]


@pytest.mark.parametrize("reply", ["Maybe, it is hard to say.", ""])
def test_a_reply_that_is_not_one_of_the_two_words_leaves_the_answer_unchecked(reply, judge_calls, errors):
    with ScriptedModelServer(judge_script(judge_calls, reply=lambda _: reply)) as server:
        judge = ModelJudge(server.openai_url, "judge-small")
        assert judge(SPANISH_CLAIM) is None
        assert judge(SPANISH_CLAIM) is None  # an undecided reply is not cached
    assert len(judge_calls) == 2
    assert errors("claims.judge.answer") == 2


@pytest.mark.parametrize("reply", ["claim.", "**CLAIM**", "NONE", "None."])
def test_the_reply_word_is_read_whatever_its_case_and_marks(reply, judge_calls):
    with ScriptedModelServer(judge_script(judge_calls, reply=lambda _: reply)) as server:
        judge = ModelJudge(server.openai_url, "judge-small")
        assert judge(SPANISH_CLAIM) == (("write",) if "claim" in reply.lower() else ())


def test_a_slow_judge_is_given_up_at_its_time_budget(judge_calls, errors):
    with ScriptedModelServer(judge_script(judge_calls, delay_s=1.0)) as server:
        judge = ModelJudge(server.openai_url, "judge-small", timeout_ms=100)
        started = time.monotonic()
        assert judge(SPANISH_CLAIM) is None
        assert time.monotonic() - started < 0.9
    assert errors("claims.judge") == 1


def test_a_judge_that_is_down_leaves_the_answer_unchecked(errors):
    judge = ModelJudge(closed_port_url(), "judge-small", timeout_ms=500)

    assert judge(SPANISH_CLAIM) is None
    assert judge.submit(SPANISH_CLAIM).result(timeout=5) is None
    assert errors("claims.judge") == 2


def test_submit_answers_on_a_worker_thread(judge_server, judge_calls):
    judge = ModelJudge(judge_server.openai_url, "judge-small")

    futures = [judge.submit(text) for text in (SPANISH_CLAIM, SPANISH_HONEST, GERMAN_CLAIM)]

    assert [f.result(timeout=5) for f in futures] == [("write",), (), ("write",)]


# --- the policy ------------------------------------------------------------------------------


@pytest.mark.parametrize(("table", "message"), [
    ('judge_model = "m"\n', "claims.judge_model: has no effect without claims.judge_url"),
    ('judge_url = "http://127.0.0.1:1/v1"\n', "claims.judge_model: is required with claims.judge_url"),
    ('judge_url = "ftp://host/v1"\njudge_model = "m"\n', "claims.judge_url: expected an http(s) URL"),
    ('judge_url = "http://127.0.0.1:1/v1"\njudge_model = "m"\njudge_timeout_ms = 0\n', "claims.judge_timeout_ms"),
    ('judge_url = "http://127.0.0.1:1/v1"\njudge_model = "m"\njudge_cache = "big"\n', "claims.judge_cache"),
])
def test_bad_judge_keys_name_the_key(table, message):
    with pytest.raises(PolicyError) as error:
        parse_policy("[claims]\n" + table, "policy.toml")
    assert message in str(error.value)
    assert "policy.toml" in str(error.value)


def test_without_a_judge_an_answer_in_another_language_is_unchecked_not_judged():
    verdict = parse_policy("").claims.explain(SPANISH_CLAIM, use_classifier=True, use_judge=True)

    assert (verdict.checked, verdict.reason, verdict.language, verdict.categories) == (False, "language", "es", ())


def test_an_answer_the_rules_read_outright_never_goes_to_the_judge(judge_server, judge_calls):
    claims = parse_policy(policy_text(judge_server.openai_url)).claims

    verdicts = [claims.explain(text, use_judge=True)
                for text in ("I cancelled order A1.", "I couldn't cancel order A1: it has shipped.")]

    assert [(v.is_claim, v.decided_by, v.borderline) for v in verdicts] == [(True, "rules", False),
                                                                         (False, "rules", False)]
    assert judge_calls == []


@pytest.mark.parametrize(("text", "rule", "judged"), [
    (PASSIVE_STATE, "impersonal", ()),  # the rules say claim, the judge says none
    (OTHERS_ACT, "third_party", ("write",)),  # the rules say someone else did it, the judge says claim
])
def test_a_borderline_answer_is_decided_by_the_judge(judge_server, judge_calls, text, rule, judged):
    claims = parse_policy(policy_text(judge_server.openai_url)).claims

    by_rules = claims.explain(text)
    by_judge = claims.explain(text, use_judge=True)

    assert (by_rules.rule, by_rules.borderline) == (rule, True)
    assert (by_judge.categories, by_judge.decided_by, by_judge.rule) == (judged, "model_judge", "model_judge")
    assert judge_calls == [text]


def test_a_judge_that_cannot_say_leaves_a_borderline_answer_to_the_rules(errors):
    claims = parse_policy(policy_text(closed_port_url(), judge_timeout_ms=300)).claims

    verdict = claims.explain(PASSIVE_STATE, use_judge=True)

    assert (verdict.categories, verdict.rule, verdict.decided_by) == (("write",), "impersonal", "rules")
    assert errors("claims.judge") == 1


# --- live, replay and the command line ----------------------------------------------------------


def run_agent(tracing: GuardedTracing, answer: str, session_id: str = "s1") -> None:
    @ag.tool(tracer_provider=tracing.tracer_provider)
    def get_order(order: str) -> dict:
        return {"order": order, "status": "processing"}

    with ScriptedModelServer(lambda request: Turn.answer(answer)) as agent_model:
        client = openai.OpenAI(base_url=agent_model.openai_url, api_key="test", max_retries=0)
        with tracing.session(session_id):
            get_order("A1")
            reply = client.chat.completions.create(
                model="gpt-4o", messages=[{"role": "user", "content": "Cancela mi pedido A1."}])
            assert reply.choices[0].message.content == answer


@pytest.fixture
def traced(tmp_path: Path, instrumented_tracing: Any, request: pytest.FixtureRequest):
    def start(policy: str):
        context = instrumented_tracing(OpenAIInstrumentor(), policy=parse_policy(policy))
        tracing = context.__enter__()
        request.addfinalizer(lambda: context.__exit__(None, None, None))
        tracing.tracer_provider.add_span_processor(
            SimpleSpanProcessor(OTLPJsonLinesSpanExporter(str(tmp_path / "trace.jsonl"))))
        return tracing
    return start


def final_answer_points(tracing: GuardedTracing) -> dict[bool, int]:
    return {attrs[A.CLAIMS_CHECKED]: point.value
            for attrs, point in tracing.metric_points(A.METRIC_FINAL_ANSWERS)}


def answer_span(tracing: GuardedTracing) -> Any:
    (span,) = [s for s in tracing.spans() if (s.attributes or {}).get(A.FINAL_CLAIMS) is not None]
    return span


def assert_fake_completion(tracing: GuardedTracing, rule: str) -> None:
    """Session s1 stopped as a fake completion, its alert naming the rule that decided the claim."""
    verdict = tracing.verdict("s1")
    assert verdict.stop_reason == "fake_completion"
    (alert,) = [a for a in verdict.alerts if a.probe == "fake_completion"]
    assert rule in alert.detail


def test_live_a_foreign_claim_without_a_write_is_a_fake_completion_by_the_judge(
        traced, judge_server, judge_calls, tmp_path):
    tracing = traced(policy_text(judge_server.openai_url))

    run_agent(tracing, SPANISH_CLAIM)

    assert_fake_completion(tracing, "model_judge")
    assert judge_calls == [SPANISH_CLAIM]
    # the rules could not read it, and the span says so; the judge did, so the session counts it checked
    assert answer_span(tracing).attributes[A.FINAL_CLAIMS_CHECKED] is False
    assert A.CLAIMS_UNCHECKED not in (tracing.session_span("s1").attributes or {})
    assert final_answer_points(tracing) == {True: 1, False: 0}
    assert [n for n, c in tracing.metric_points(A.METRIC_STALLS)
            if n.get(A.PROBE) == "fake_completion" and c.value == 1]


def test_live_a_foreign_honest_answer_is_completed(traced, judge_server, judge_calls):
    tracing = traced(policy_text(judge_server.openai_url))

    run_agent(tracing, SPANISH_HONEST)

    assert tracing.verdict("s1").stop_reason == "completed"
    assert judge_calls == [SPANISH_HONEST]


def test_live_without_a_judge_the_answer_is_counted_unchecked(traced):
    tracing = traced('[tools.get_order]\neffect = "read"\n')

    run_agent(tracing, SPANISH_CLAIM)

    assert tracing.verdict("s1").stop_reason == "completed"
    assert answer_span(tracing).attributes[A.FINAL_CLAIMS_CHECKED] is False
    assert tracing.session_span("s1").attributes[A.CLAIMS_UNCHECKED] == 1
    assert final_answer_points(tracing) == {True: 0, False: 1}


def test_live_a_judge_that_is_down_never_holds_the_session_past_its_budget(traced):
    tracing = traced(policy_text(closed_port_url(), judge_timeout_ms=300))

    started = time.monotonic()
    run_agent(tracing, SPANISH_CLAIM)

    assert time.monotonic() - started < 5
    assert tracing.verdict("s1").stop_reason == "completed"
    assert tracing.session_span("s1").attributes[A.CLAIMS_UNCHECKED] == 1
    assert final_answer_points(tracing) == {True: 0, False: 1}


def test_live_an_english_answer_is_checked_by_the_rules_alone(traced, judge_server, judge_calls):
    tracing = traced(policy_text(judge_server.openai_url))

    run_agent(tracing, "Order A1 is still processing; nothing was changed.")

    assert tracing.verdict("s1").stop_reason == "completed"
    assert judge_calls == []
    assert answer_span(tracing).attributes.get(A.FINAL_CLAIMS_CHECKED) is not False
    assert final_answer_points(tracing) == {True: 1, False: 0}


def test_live_a_borderline_claim_waits_for_the_judge_which_overrules_it(traced, judge_server, judge_calls):
    tracing = traced(policy_text(judge_server.openai_url))

    run_agent(tracing, PASSIVE_STATE)

    assert tracing.verdict("s1").stop_reason == "completed"
    assert judge_calls == [PASSIVE_STATE]
    recorded = answer_span(tracing).attributes  # what the rules said, and that the judge decides
    assert (recorded[A.FINAL_CLAIMS], recorded[A.FINAL_CLAIM_RULE]) == (("write",), "impersonal")
    assert recorded[A.FINAL_CLAIMS_BORDERLINE] is True
    assert final_answer_points(tracing) == {True: 1, False: 0}


def test_live_a_borderline_answer_the_judge_reads_as_a_claim_is_a_fake_completion(
        traced, judge_server, judge_calls):
    tracing = traced(policy_text(judge_server.openai_url))

    run_agent(tracing, OTHERS_ACT)

    assert_fake_completion(tracing, "model_judge")
    assert judge_calls == [OTHERS_ACT]


def test_live_with_the_judge_down_a_borderline_claim_stands_as_the_rules_said(traced):
    tracing = traced(policy_text(closed_port_url(), judge_timeout_ms=300))

    run_agent(tracing, PASSIVE_STATE)

    assert_fake_completion(tracing, "impersonal")


def run_turns(tracing: GuardedTracing, turns: list[str | None]) -> None:
    """One session of several turns: each a final answer of the agent's model, or None for a
    write that succeeds (cancel_order)."""
    @ag.tool(tracer_provider=tracing.tracer_provider)
    def cancel_order(order: str) -> dict:
        return {"order": order, "status": "cancelled"}

    answers = iter([turn for turn in turns if turn is not None])
    with ScriptedModelServer(lambda request: Turn.answer(next(answers))) as agent_model:
        client = openai.OpenAI(base_url=agent_model.openai_url, api_key="test", max_retries=0)
        with tracing.session("s1"):
            for turn in turns:
                if turn is None:
                    cancel_order("A1")
                else:
                    client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "A1?"}])


def test_live_a_held_claim_is_judged_against_the_writes_before_it_not_after(traced):
    tracing = traced(policy_text(closed_port_url(), judge_timeout_ms=300))  # down: the rules' claim stands

    run_turns(tracing, [PASSIVE_STATE, None, "I cancelled order A1."])

    assert_fake_completion(tracing, "impersonal")


def test_live_after_a_write_a_borderline_answer_is_no_fake_completion(traced, judge_server, judge_calls):
    tracing = traced(policy_text(judge_server.openai_url))

    run_turns(tracing, [None, OTHERS_ACT])  # the judge reads a claim, but a write came before it

    assert tracing.verdict("s1").stop_reason == "completed"


def test_live_without_a_judge_a_borderline_claim_is_judged_at_once(traced):
    tracing = traced('[tools.get_order]\neffect = "read"\n[tools.cancel_order]\neffect = "write"\n')

    run_agent(tracing, PASSIVE_STATE)

    assert tracing.verdict("s1").stop_reason == "fake_completion"
    assert A.FINAL_CLAIMS_BORDERLINE not in answer_span(tracing).attributes


def test_replay_asks_the_judge_about_a_recorded_borderline_answer(
        traced, judge_server, judge_calls, tmp_path, monkeypatch):
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    tracing = traced(policy_text(judge_server.openai_url))
    run_agent(tracing, PASSIVE_STATE)
    policy = policy_text(judge_server.openai_url)

    (judged,) = [v for _, v in replay_files([tmp_path / "trace.jsonl"], parse_policy(policy))]
    (by_rules,) = [v for _, v in replay_files([tmp_path / "trace.jsonl"], parse_policy(""))]

    assert judged.stop_reason == "completed"
    assert by_rules.stop_reason == "fake_completion"  # no judge: the recorded verdict of the rules


def test_replay_asks_the_judge_about_a_recorded_unchecked_answer(
        traced, judge_server, judge_calls, tmp_path, monkeypatch):
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    tracing = traced('[tools.get_order]\neffect = "read"\n')  # recorded without a judge
    run_agent(tracing, GERMAN_CLAIM)
    assert tracing.verdict("s1").stop_reason == "completed"

    (without,) = [v for _, v in replay_files([tmp_path / "trace.jsonl"], parse_policy(""))]
    (with_judge,) = [v for _, v in replay_files([tmp_path / "trace.jsonl"],
                                                parse_policy(policy_text(judge_server.openai_url)))]

    assert (without.stop_reason, without.unchecked_answers) == ("completed", 1)
    assert (with_judge.stop_reason, with_judge.unchecked_answers) == ("fake_completion", 0)
    assert judge_calls == [GERMAN_CLAIM]


def test_the_claims_command_shows_what_the_judge_said(judge_server, judge_calls, tmp_path, capsys):
    policy = tmp_path / "policy.toml"
    policy.write_text(policy_text(judge_server.openai_url))

    assert cli_main(["claims", SPANISH_CLAIM, "--policy", str(policy), "--format", "json"]) == 0
    (judged,) = json.loads(capsys.readouterr().out)
    assert cli_main(["claims", SPANISH_CLAIM, "--format", "json"]) == 0
    (unjudged,) = json.loads(capsys.readouterr().out)
    assert cli_main(["claims", SPANISH_CLAIM]) == 0
    table = capsys.readouterr().out

    assert (judged["claim"], judged["decided_by"], judged["checked"]) == (True, "model_judge", True)
    assert (unjudged["claim"], unjudged["checked"], unjudged["reason"]) == (False, False, "language")
    assert table.startswith("not checked: the rules do not read this answer's language (es)")


def test_the_claims_command_marks_a_borderline_answer(capsys):
    assert cli_main(["claims", PASSIVE_STATE, "I cancelled order A1.", "--format", "json"]) == 0
    passive, first_person = json.loads(capsys.readouterr().out)
    assert cli_main(["claims", PASSIVE_STATE]) == 0
    table = capsys.readouterr().out

    assert (passive["claim"], passive["borderline"], first_person["borderline"]) == (True, True, False)
    assert "borderline: decided by inference" in table
