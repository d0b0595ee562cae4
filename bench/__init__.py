"""Benchmarks of otel_agentguard against what users already run (``make bench``).

Every figure is the median of interleaved repeats (each repeat runs every variant
once, in alternating order, so machine noise hits all alike), printed with its min
and max. Ratios are taken within a repeat and then summarised the same way: only
ratios are comparable across runs and machines, never absolute times.
"""
