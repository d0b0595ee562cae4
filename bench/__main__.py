"""``python -m bench`` (``make bench``): every benchmark, then one table of figures and ratios.

Options: ``--quick`` (smaller counts, a few minutes), ``--smoke`` (every section at tiny
sizes in well under a minute: proves the benchmark runs, measures nothing), ``--repeats N``,
``--only 1,3`` (sections), ``--stream-sessions N`` (memory stream; default 300,000,
quick 50,000; 1,000,000 takes about five minutes here), ``--replay-spans N`` (default
1,000,000, quick 100,000), ``--cpu N``
(the core to pin to; default the last one), ``--markdown FILE`` (also write the table).
Section ``claims`` scores the claim detector on the labelled corpus (``--only claims``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from bench import _harness
from bench._harness import Report, machine, progress


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller counts: a smoke run in about two minutes")
    parser.add_argument("--smoke", action="store_true",
                        help="every section at tiny sizes, one repeat: that it runs, not what it measures")
    parser.add_argument("--repeats", type=int, default=None, help="interleaved repeats per figure (default 5, quick 3)")
    parser.add_argument("--only", default="1,2,3,4,5,6,7,claims,yaml,repetition",
                        help="sections to run, e.g. 1,3,claims")
    parser.add_argument("--stream-sessions", type=int, default=None,
                        help="sessions streamed through the processor for (4) (default 300,000; quick 50,000)")
    parser.add_argument("--replay-spans", type=int, default=None,
                        help="spans in the replay file for (5) (default 1,000,000; quick 100,000)")
    parser.add_argument("--cpu", type=int, default=None, help="pin to this core (default: the last one)")
    parser.add_argument("--markdown", default=None, help="also write the machine and the table to this file")
    args = parser.parse_args(argv)
    if args.smoke:
        _harness.SMOKE = True
        args.quick = True
    repeats = args.repeats or (1 if args.smoke else 3 if args.quick else 5)
    sections = {part.strip() for part in args.only.split(",") if part.strip()}
    stream_sessions = args.stream_sessions or (2_000 if args.smoke else 50_000 if args.quick else 300_000)
    replay_spans = args.replay_spans or (2_000 if args.smoke else 100_000 if args.quick else 1_000_000)

    # One core for everything (the replay figure is single-core by definition; children inherit
    # it): the other core keeps the rest of the machine's noise off the measurements.
    if hasattr(os, "sched_setaffinity"):
        cpus = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {args.cpu if args.cpu is not None else cpus[-1]})
    os.environ.setdefault("OTEL_AGENTGUARD_FINGERPRINT_KEY", "bench")

    report = Report()
    began = time.perf_counter()
    if "claims" in sections:
        from bench import claims_corpus

        claims_corpus.run(report)
    if "yaml" in sections:
        # Before the sections that grow this process: a child's peak RSS counts the parent's
        # pages it was forked with, until it execs.
        from bench import yaml_trajectory

        yaml_trajectory.run(report, 1 if args.smoke else 2 if args.quick else 3, args.quick)
    if "2" in sections:
        from bench import fingerprint_cost

        fingerprint_cost.run(report, repeats, args.quick)
        fingerprint_cost.worst_case(report, args.quick)
    if "1" in sections:
        from bench import processor_cost

        processor_cost.processor_cost(report, repeats, args.quick)
        processor_cost.ordinary_spans(report, repeats, args.quick)
        processor_cost.foreign_spans(report, repeats, args.quick)
        from bench import bytecodes

        bytecodes.run(report, args.quick)
    if "3" in sections:
        from bench import openai_call

        openai_call.run(report, repeats, args.quick)
    if "6" in sections:
        from bench import processor_cost

        processor_cost.scaling(report, 1 if args.smoke else max(repeats - 2, 3), args.quick)
    if "4" in sections:
        from bench import memory

        memory.run(report, 1 if args.smoke else 3, args.quick, stream_sessions)
    if "repetition" in sections:
        from bench import repetition_cost

        repetition_cost.run(report, repeats, args.quick)
    if "5" in sections:
        from bench import replay_throughput

        replay_throughput.run(report, 1 if args.smoke else 3 if args.quick or replay_spans <= 200_000 else 2,
                              args.quick, replay_spans)
    if "7" in sections:
        from bench import serve_throughput

        serve_throughput.run(report, 1 if args.smoke else 3, args.quick)
    elapsed = time.perf_counter() - began
    progress(f"done in {elapsed / 60:.1f} min")

    info = machine()
    lines = ["machine: " + "; ".join(f"{key} {value}" for key, value in info.items()), "",
             f"{repeats} interleaved repeats per figure unless noted; median, min and max of the repeats.", "",
             *(["smoke run: tiny sizes, one repeat; it shows that every section runs, its figures mean nothing",
                ""] if args.smoke else []),
             report.table(), ""]
    lines += [f"- {note}" for note in report.notes]
    met = [row for row in report.rows if row.met is not None]
    lines += ["", f"targets met: {sum(1 for row in met if row.met)} of {len(met)}; "
              f"total time {elapsed / 60:.1f} min"]
    text = "\n".join(lines)
    print(text)
    if args.markdown:
        with open(args.markdown, "w", encoding="utf-8") as handle:
            handle.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
