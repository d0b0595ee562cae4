_instruments = ("langchain-core >= 0.3",)
