

def test_a_disabled_probe_checks_nothing_and_records_nothing():
    policy = parse_policy('[profiles.default]\ndisabled_probes = ["output_repetition"]\n')
    tracing = GuardedTracing(policy, "enforce")
    instrumentor = OpenAIInstrumentor()
    instrumentor.instrument(tracer_provider=tracing.tracer_provider)
    try:
        text, stopped = run_session(tracing, openai_chat, CHANT)
        assert stopped is None and text == CHANT.text
        assert A.OUTPUT_REPETITION not in model_span(tracing).attributes
        assert tracing.session_span("s1").attributes[A.STOP_REASON] == A.COMPLETED
    finally:
        instrumentor.uninstrument()
        tracing.shutdown()
