"""The optional compiled module; everything else about the package is in pyproject.toml."""

from setuptools import Extension, setup

# The plain-JSON check of large arguments' fingerprints, compiled when a C compiler is at hand;
# without one (``optional``) the package installs all the same and runs the check in Python.
# The same for the attribute decoding of replay's typed reader, and for the step reader shared by
# the live guard and replay, the judge's pass over a step, the processor's start and end of
# a step span and the memory of raw payloads' fingerprints: pure Python without them.
setup(ext_modules=[
    Extension("otel_agentguard._plain_check", ["otel_agentguard/_plain_check.c"],
              depends=["otel_agentguard/_json_text_form.h", "otel_agentguard/_keyed_hash.h"], optional=True),
    Extension("otel_agentguard.replay._typed_attributes", ["otel_agentguard/replay/_typed_attributes.c"],
              optional=True),
    Extension("otel_agentguard._step_reader", ["otel_agentguard/_step_reader.c"],
              depends=["otel_agentguard/_slots.h"], optional=True),
    Extension("otel_agentguard._judge_pass", ["otel_agentguard/_judge_pass.c"],
              depends=["otel_agentguard/_slots.h"], optional=True),
    Extension("otel_agentguard._span_paths", ["otel_agentguard/_span_paths.c"],
              depends=["otel_agentguard/_slots.h"], optional=True),
    Extension("otel_agentguard._payload_memory", ["otel_agentguard/_payload_memory.c"],
              depends=["otel_agentguard/_slots.h"], optional=True),
])
