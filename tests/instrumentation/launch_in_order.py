"""Run a module as ``opentelemetry-instrument`` would, with the instrumentors loaded in a chosen order.

::

    python launch_in_order.py agentguard-first|agentguard-last COMPANION MODULE

The launcher loads ``opentelemetry_instrumentor`` entry points in whatever
order the installed distributions list them. This runs its own initialisation
(``auto_instrumentation.initialize``, what its ``sitecustomize`` calls) with
that list put in the order asked for, keeping agentguard's entry points and
those of one other OpenAI instrumentation (``openai-v2`` or ``openllmetry``),
then runs ``MODULE`` as ``__main__``. With ``AGENTGUARD_HIDE_DISTRO=1`` the
entry points of ``opentelemetry-distro`` are hidden, from the launcher and from
us, as if it were not installed.
"""

from __future__ import annotations

import os
import runpy
import sys

from opentelemetry.instrumentation.auto_instrumentation import _load, initialize

from otel_agentguard.instrumentation import auto

COMPANION_MODULES = {
    "openai-v2": "opentelemetry.instrumentation.openai_v2",
    "openllmetry": "opentelemetry.instrumentation.openai:",
}


def main() -> None:
    order, companion, module = sys.argv[1:4]
    if order not in ("agentguard-first", "agentguard-last") or companion not in COMPANION_MODULES:
        raise SystemExit(__doc__)
    companion_value = COMPANION_MODULES[companion]
    listed = _load.entry_points

    hide_distro = os.environ.get("AGENTGUARD_HIDE_DISTRO") == "1"

    def in_order(**kwargs):  # the launcher's own lookup, reordered for one group
        found = list(listed(**kwargs))
        if hide_distro:
            found = [ep for ep in found if not ep.value.startswith("opentelemetry.distro")]
        if kwargs.get("group") != "opentelemetry_instrumentor":
            return found
        ours = [ep for ep in found if ep.name.startswith("agentguard")]
        theirs = [ep for ep in found if ep.value.startswith(companion_value)]
        return ours + theirs if order == "agentguard-first" else theirs + ours

    _load.entry_points = in_order
    auto.entry_points = in_order
    initialize(swallow_exceptions=False)
    sys.argv = [module]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
