"""The optional compiled module; everything else about the package is in pyproject.toml."""

from setuptools import Extension, setup

# The plain-JSON check of large arguments' fingerprints, compiled when a C compiler is at hand;
# without one (``optional``) the package installs all the same and runs the check in Python.
setup(ext_modules=[Extension("otel_agentguard._plain_check", ["otel_agentguard/_plain_check.c"], optional=True)])
