_instruments = ("openai-agents >= 0.1",)
