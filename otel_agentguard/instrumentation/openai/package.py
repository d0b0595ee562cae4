_instruments = ("openai >= 1.66",)
