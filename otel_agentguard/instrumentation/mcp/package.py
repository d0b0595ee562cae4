_instruments = ("mcp >= 1.0",)
