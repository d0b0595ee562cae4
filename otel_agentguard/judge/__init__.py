"""The judge: spans and trajectory lines become steps, and steps become alerts and a verdict.

Everything here is pure and feed-agnostic: the live guard (:mod:`otel_agentguard.live`), the offline
replay (:mod:`otel_agentguard.replay`) and the judge service (:mod:`otel_agentguard.serve`) hand it
the same steps and get the same verdicts.

- :mod:`~otel_agentguard.judge.steps`: span attributes -> :class:`~otel_agentguard.judge.steps.Step`
- :mod:`~otel_agentguard.judge.session_judge`: one session's steps -> alerts and a verdict
- :mod:`~otel_agentguard.judge.probes`: the stall probes, one module each
- :mod:`~otel_agentguard.judge.policy`, :mod:`~otel_agentguard.judge.pricing`: thresholds, tool contracts, prices
- :mod:`~otel_agentguard.judge.claims`: what a final answer claims to have done
- :mod:`~otel_agentguard.judge.fingerprints`: canonical forms and keyed fingerprints
- :mod:`~otel_agentguard.judge.repetition`: an answer that repeats itself
- :mod:`~otel_agentguard.judge.derived`, :mod:`~otel_agentguard.judge.tool_calls`: tool calls only a model span recorded
"""
