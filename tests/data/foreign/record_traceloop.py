"""Record the foreign scenarios under the Traceloop SDK (OpenLLMetry), for the replay tests.

The Traceloop SDK cannot be installed beside the test extras (see README.md here); run this
in a virtual environment that has it:

    python tests/data/foreign/record_traceloop.py loop tests/data/foreign/

It writes ``traceloop-<scenario>.jsonl`` (the SDK's spans alone, with its association
properties naming the session) and ``traceloop-<scenario>-live.json`` (the verdicts the
guard's processor wrote when installed on the SDK's provider for a second run).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "foreign"))

from foreign_agents import POLICY, SCENARIOS, run_openai_agent  # noqa: E402
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402
from traceloop.sdk import Traceloop  # noqa: E402
from traceloop.sdk.instruments import Instruments  # noqa: E402

import otel_agentguard as ag  # noqa: E402
from otel_agentguard import attributes as A  # noqa: E402
from otel_agentguard.exporters import OTLPJsonLinesSpanExporter  # noqa: E402
from otel_agentguard.scripted_model import ScriptedModelServer, turns  # noqa: E402


class _Switch(SpanExporter):
    def __init__(self, target: SpanExporter):
        self.target = target

    def export(self, spans):  # type: ignore[no-untyped-def]
        return self.target.export(spans) if self.target else SpanExportResult.SUCCESS


def main(name: str, out: Path) -> None:
    scenario = SCENARIOS[name]
    recorder = OTLPJsonLinesSpanExporter(str(out / f"traceloop-{name}.jsonl"))
    switch = _Switch(recorder)
    Traceloop.init(app_name="support-agent", exporter=switch, disable_batch=True, instruments={Instruments.OPENAI},
                   telemetry_enabled=False)

    def run() -> None:
        Traceloop.set_association_properties({"session_id": f"order-A1-{name}"})
        with ScriptedModelServer(turns(*scenario.turns)) as server:
            run_openai_agent(server)

    run()
    recorder.shutdown()
    live = InMemorySpanExporter()
    switch.target = live
    ag.install(policy=POLICY)  # the guard on the provider the SDK configured
    run()
    ag_spans = [s for s in live.get_finished_spans() if A.STOP_REASON in (s.attributes or {})]
    alerts = [[e.attributes[A.PROBE], e.attributes[A.SEQUENCE], list(e.attributes[A.EVIDENCE])]
              for s in ag_spans for e in s.events if e.name == A.STALL_EVENT]
    verdicts = [{"session_id": s.attributes[A.SESSION_ID], "stop_reason": s.attributes[A.STOP_REASON],
                 "alerts": alerts, "steps": s.attributes[A.STEPS], "tokens": s.attributes[A.TOKENS]} for s in ag_spans]
    (out / f"traceloop-{name}-live.json").write_text(json.dumps(verdicts, indent=1))


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
