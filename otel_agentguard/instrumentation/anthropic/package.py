_instruments = ("anthropic >= 0.40",)
