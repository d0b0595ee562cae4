"""Canonical forms and keyed fingerprints of tool arguments and results.

- :mod:`~otel_agentguard.judge.fingerprints.canonical`: the canonical form and :class:`Fingerprinter`
- :mod:`~otel_agentguard.judge.fingerprints.payloads`: raw JSON payloads of foreign spans, remembered per text
- ``_plain_json``, ``_json_text``, ``_json_text_form``: orjson (or the standard library) writing the form of
  plain JSON values, checked on its output; ``_readable``: what may be read without running application code
"""
