"""The demo: a small real agent on the ``openai`` SDK, judged live and on replay."""
