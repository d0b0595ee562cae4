"""The ``agentguard`` command line (also ``python -m otel_agentguard``).

::

    agentguard replay FILE... [--policy P.toml] [--profile NAME] [--format table|json]
                              [--compare-profile NAME] [--allow-empty]
    agentguard check SUITE... [--policy P.toml] [--profile NAME] [--format table|json] [--allow-empty]
    agentguard report FILE... [--policy P.toml] [--format table|json] [--allow-empty]
    agentguard claims TEXT... [--policy P.toml] [--format table|json]
    agentguard demo [--out DIR]

Exit status: 0 when it ran (and, for ``check``, every label held), 1 when a
``check`` label was missed, 2 for unusable input: the message names the file
and line, and no traceback is printed. Inputs without any session are unusable
unless ``--allow-empty`` is given (an empty export usually means a broken one).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from otel_agentguard.environment_variables import OTEL_AGENTGUARD_FINGERPRINT_KEY
from otel_agentguard.judge.claims import classifier_everywhere
from otel_agentguard.judge.fingerprints.canonical import set_fingerprint_key
from otel_agentguard.judge.policy import Policy, PolicyError, coerce_policy, load_policy
from otel_agentguard.judge.session_judge import Verdict
from otel_agentguard.replay import render
from otel_agentguard.replay.errors import InputError
from otel_agentguard.replay.recorded import RecordedSession
from otel_agentguard.replay.runner import judge_recorded
from otel_agentguard.replay.sources import find_policy_reference, read_files
from otel_agentguard.version import __version__

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


class UsageError(Exception):
    """A command-line mistake reported as one line, exit status 2."""


def _policy_for(args: argparse.Namespace, documents: dict[str, Any]) -> Policy:
    if args.policy:
        return load_policy(args.policy)
    reference = find_policy_reference(args.files, documents)
    if reference is None:
        return coerce_policy(None)
    try:
        return load_policy(reference.path)
    except PolicyError as exc:  # say which file named it, and where
        raise InputError(reference.source, f"policy: {exc}", reference.line) from None


def _check_profile(policy: Policy, name: str | None, option: str) -> None:
    if name and name not in policy.profiles:
        raise UsageError(f"{option}: no profile named {name!r} in {policy.source} (have: {', '.join(policy.profiles)})")


def _judge_all(args: argparse.Namespace) -> tuple[Policy, list[render.Judged]]:
    # Reading builds millions of small containers and frees none: the cyclic collector
    # would re-scan them all again and again (more than half the time on large files).
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _read_and_judge(args)
    finally:
        if collecting:
            # What was read stays until the end: set it aside, or the first collection after
            # this would scan all of it at once.
            gc.freeze()
            gc.enable()


def _read_and_judge(args: argparse.Namespace) -> tuple[Policy, list[render.Judged]]:
    documents: dict[str, Any] = {}  # trajectory documents parsed while looking for a policy
    policy = _policy_for(args, documents)
    _check_profile(policy, args.profile, "--profile")
    bar = _ProgressBar.for_inputs(args.files)
    try:
        with classifier_everywhere():  # offline: the policy's claim classifier may be waited for
            sessions = read_files(args.files, policy, bar.update if bar else None, documents)
            if not sessions and not args.allow_empty:
                more = f" and {len(args.files) - 5} more files" if len(args.files) > 5 else ""
                named = ", ".join(args.files[:5]) + more
                raise UsageError(f"no sessions in {named} (an empty or broken export?); "
                                 "give --allow-empty if none is expected")
            if bar:
                bar.judging(len(sessions))
            judged = [(session, judge_recorded(session, policy, args.profile)) for session in sessions]
    finally:
        if bar:
            bar.close()
    return policy, judged


class _ProgressBar:
    """Progress of a long replay on stderr (only a terminal, only large inputs): stdout stays clean."""

    MIN_BYTES = 32 << 20
    WIDTH = 30

    def __init__(self, total: int):
        self.total = total
        self.started = time.monotonic()
        self.shown = 0.0

    @classmethod
    def for_inputs(cls, files: Sequence[str]) -> _ProgressBar | None:
        try:
            if not sys.stderr.isatty():
                return None
            total = sum(os.path.getsize(path) for path in files if os.path.isfile(path))
        except (OSError, ValueError):  # a closed or odd stderr, an unreadable file: no bar
            return None
        return cls(total) if total >= cls.MIN_BYTES else None

    def update(self, done: int) -> None:
        now = time.monotonic()
        if now - self.shown < 0.2 and done < self.total:
            return
        self.shown = now
        share = min(done / self.total, 1.0) if self.total else 1.0
        filled = int(share * self.WIDTH)
        rate = done / max(now - self.started, 1e-9) / 2**20
        self._write(f"reading [{'#' * filled}{'.' * (self.WIDTH - filled)}] {share:4.0%} "
                    f"{done / 2**20:,.0f}/{self.total / 2**20:,.0f} MiB {rate:,.0f} MiB/s")

    def judging(self, sessions: int) -> None:
        self._write(f"judging {sessions:,} sessions ...")

    def close(self) -> None:
        self._write("")

    def _write(self, text: str) -> None:
        try:
            sys.stderr.write("\r\x1b[2K" + (f"agentguard: {text}" if text else ""))
            sys.stderr.flush()
        except (OSError, ValueError):  # stderr went away: the replay itself goes on
            pass


def _emit(args: argparse.Namespace, as_json: object, as_table: Callable[[], str]) -> None:
    if args.format == "json":
        # Strict JSON: a non-finite number (never valid JSON) is written as null. Such numbers
        # are rare, and walking a large output for them costs: only when dumping refuses one.
        indent = None if args.compact else 2
        try:
            text = json.dumps(as_json, ensure_ascii=False, allow_nan=False, indent=indent)
        except ValueError:
            text = json.dumps(render.finite(as_json), ensure_ascii=False, allow_nan=False, indent=indent)
        print(text)
    else:
        print(as_table())


def _write_html(args: argparse.Namespace, policy: Policy, judged: list[tuple[RecordedSession, Verdict]]) -> None:
    if not args.html:
        return
    from otel_agentguard.replay.html import render_page

    try:
        Path(args.html).write_text(render_page(judged, policy, title=f"agentguard {args.command}: "
                                               + ", ".join(Path(f).name for f in args.files[:3])),
                                   encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"--html: cannot write {args.html}: {exc.strerror or exc}") from None
    print(f"agentguard: the page of {render.counted(len(judged), 'session')} is in {args.html}", file=sys.stderr)


def cmd_replay(args: argparse.Namespace) -> int:
    policy, judged = _judge_all(args)
    _write_html(args, policy, judged)
    compared = None
    if args.compare_profile:
        _check_profile(policy, args.compare_profile, "--compare-profile")
        compared = [judge_recorded(session, policy, args.compare_profile) for session, _ in judged]
    _emit(args, render.replay_json(judged, compared), lambda: render.replay_table(judged, compared))
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    _, judged = _judge_all(args)
    outcomes, unlabelled = render.check_outcomes(judged)
    if not outcomes and judged:
        raise UsageError("no labelled sessions to check (give sessions an 'expect:' of 'pass' or {stop: [...]})")
    _emit(args, render.check_json(outcomes, unlabelled), lambda: render.check_table(outcomes, unlabelled))
    return 0 if all(outcome.ok for outcome in outcomes) else 1


def cmd_report(args: argparse.Namespace) -> int:
    policy, judged = _judge_all(args)
    _write_html(args, policy, judged)
    verdicts = [verdict for _, verdict in judged]
    _emit(args, render.report_json(verdicts), lambda: render.report_table(verdicts))
    return 0


EXAMPLE_FILES = {
    "policy.toml": "a policy: tool effects, thresholds, budgets (the one the two suites name)",
    "support_sessions.yaml": "four support-agent sessions, labelled: a regression suite for `agentguard check`",
    "more_shapes.yaml": "more stall shapes, and look-alikes that must pass",
}


def cmd_examples(args: argparse.Namespace) -> int:
    if args.list:
        for name, about in EXAMPLE_FILES.items():
            print(f"{name:<22} {about}")
        return 0
    target = Path(args.directory)
    existing = [target / name for name in EXAMPLE_FILES if (target / name).exists()]
    if existing and not args.force:
        raise UsageError(f"{existing[0]} exists already (--force overwrites it)")
    try:
        target.mkdir(parents=True, exist_ok=True)
        for name in EXAMPLE_FILES:
            shutil.copyfile(EXAMPLES / name, target / name)
            print(target / name)
    except OSError as exc:
        raise UsageError(f"cannot write the examples into {target}: {exc.strerror or exc}") from None
    return 0


def cmd_claims(args: argparse.Namespace) -> int:
    from otel_agentguard.replay.claims_report import explain_json, explain_table

    policy = load_policy(args.policy) if args.policy else coerce_policy(None)
    texts = [sys.stdin.read() if text == "-" else text for text in args.texts]
    verdicts = [policy.claims.explain(text, use_classifier=True, use_judge=True) for text in texts]
    _emit(args, explain_json(texts, verdicts), lambda: explain_table(texts, verdicts))
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from otel_agentguard.demo.__main__ import run as run_demo

    return run_demo(args.out)


def cmd_serve(args: argparse.Namespace) -> int:
    try:
        from otel_agentguard.serve.main import ServeOptions, serve, split_address
        from otel_agentguard.serve.memory import parse_size
    except ImportError as exc:
        raise UsageError(
            f"serve needs its extra ({exc.name} is missing): pip install 'otel-agentguard[serve]'") from None
    for option, value in (("--listen", args.listen), ("--grpc-listen", args.grpc_listen)):
        if value and value != "off":
            try:
                split_address(value)
            except ValueError as exc:
                raise UsageError(f"{option}: {exc}") from None
    policy = load_policy(args.policy) if args.policy else coerce_policy(None)
    _check_profile(policy, args.profile, "--profile")
    memory: dict[str, int] = {}
    for option, value, key in (("--memory-limit", args.memory_limit, "memory_limit_bytes"),
                               ("--memory-spike", args.memory_spike, "memory_spike_bytes")):
        if value is not None:
            try:
                memory[key] = parse_size(value)
            except ValueError as exc:
                raise UsageError(f"{option}: {exc}") from None
    if "memory_spike_bytes" in memory and "memory_limit_bytes" not in memory:
        raise UsageError("--memory-spike needs --memory-limit")
    if memory.get("memory_spike_bytes", 0) >= memory.get("memory_limit_bytes", 1):
        raise UsageError("--memory-spike must be smaller than --memory-limit")
    options = ServeOptions(
        listen=args.listen, grpc_listen=None if args.grpc_listen == "off" else args.grpc_listen,
        profile=args.profile, idle_timeout_s=args.idle_timeout, settle_s=args.settle,
        max_body_bytes=args.max_body_bytes, queue_spans=args.queue_spans, read_timeout_s=args.read_timeout,
        memory_limit_bytes=memory.get("memory_limit_bytes"), memory_spike_bytes=memory.get("memory_spike_bytes"),
    )
    from otel_agentguard.serve.verdicts import ExporterError

    try:
        return serve(policy, options)
    except ExporterError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:  # the address is taken or not ours
        raise UsageError(f"cannot listen on {args.listen}: {exc.strerror or exc}") from None


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "replay": cmd_replay,
    "check": cmd_check,
    "report": cmd_report,
    "claims": cmd_claims,
    "demo": cmd_demo,
    "serve": cmd_serve,
    "examples": cmd_examples,
}


class _Parser(argparse.ArgumentParser):
    """argparse, except that a flag nobody knows is named even when a required argument is
    missing too (argparse reports the missing one first), in the usage of the command it was
    given to."""

    argv: Sequence[str] = ()
    subcommands: dict[str, argparse.ArgumentParser] = {}

    def error(self, message: str) -> NoReturn:
        if "required" in message:
            unknown = [token.split("=", 1)[0] for token in self.argv
                       if token.startswith("-") and token != "-" and not _is_number(token)
                       and token.split("=", 1)[0] not in self._option_string_actions]
            if unknown:
                message = f"unrecognized argument{'s' if len(unknown) > 1 else ''}: {' '.join(unknown)}"
        super().error(message)


def _is_number(token: str) -> bool:
    try:
        float(token)
    except ValueError:
        return False
    return True


def build_parser() -> _Parser:
    parser = _Parser(
        prog="agentguard", description="Replay recorded agent sessions through the otel_agentguard stall judge."
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, help_text: str, files_help: str | None) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_text, description=help_text)
        if files_help is not None:
            sub.add_argument("files", nargs="+", metavar="FILE", help=files_help)
            sub.add_argument("--policy", metavar="P.toml", help="policy file (default: the one a trajectory file "
                             "names, else $OTEL_AGENTGUARD_POLICY, else the built-in defaults)")
            sub.add_argument("--format", choices=("table", "json"), default="table")
            sub.add_argument("--compact", action="store_true", help="one-line JSON")
            sub.add_argument("--allow-empty", action="store_true",
                             help="inputs without any session are fine (exit 0); without it they exit 2")
        return sub

    inputs = "OTLP JSON lines, trajectory YAML/JSON or agent-trace JSON lines"
    replay = add("replay", "judge every session in the files and print the verdicts", inputs)
    replay.add_argument("--profile", metavar="NAME", help="judge every session under this profile")
    replay.add_argument("--compare-profile", metavar="NAME", help="also judge under NAME, side by side")
    html_help = ("also write one self-contained HTML page of the sessions (timeline, alerts and their "
                 "evidence, budgets; names and fingerprints only) to OUT.html")
    replay.add_argument("--html", metavar="OUT.html", help=html_help)
    check = add("check", "run a regression suite of labelled sessions; exit 1 on any miss",
                "trajectory files whose sessions carry 'expect:' labels")
    check.add_argument("--profile", metavar="NAME", help="judge every session under this profile")
    report = add("report", "stop_reason distribution and steps/tokens percentiles", inputs)
    report.set_defaults(profile=None)
    report.add_argument("--html", metavar="OUT.html", help=html_help)
    serve = add("serve", "receive OTLP traces from agents in any language, judge every session, export verdicts", None)
    serve.add_argument("--listen", default="127.0.0.1:4318", metavar="HOST:PORT",
                       help="OTLP/HTTP (default %(default)s)")
    serve.add_argument("--grpc-listen", default="127.0.0.1:4317", metavar="HOST:PORT",
                       help="OTLP/gRPC where grpcio is installed (default %(default)s; 'off' disables it)")
    serve.add_argument("--policy", metavar="P.toml", help="policy file (default: $OTEL_AGENTGUARD_POLICY, else the "
                       "built-in defaults)")
    serve.add_argument("--profile", metavar="NAME", help="profile for sessions that name none")
    serve.add_argument("--idle-timeout", type=float, default=30.0, metavar="S",
                       help="judge a trace after S quiet seconds (default %(default)s)")
    serve.add_argument("--settle", type=float, default=2.0, metavar="S",
                       help="once a trace's root span, a session span or a final answer came, judge it S seconds "
                       "after its last span (default %(default)s)")
    serve.add_argument("--memory-limit", metavar="SIZE",
                       help="resident memory the service stays under (e.g. 512MiB); above the limit minus the "
                       "spike, new requests get 503 (gRPC UNAVAILABLE) and are retried; above it, the oldest "
                       "traces are judged early (default: no limit)")
    serve.add_argument("--memory-spike", metavar="SIZE",
                       help="headroom below --memory-limit where refusing starts (default: a fifth of it)")
    serve.add_argument("--read-timeout", type=float, default=10.0, metavar="S",
                       help="close a connection whose request headers, or body, take longer than S seconds to "
                       "arrive (default %(default)s)")
    serve.add_argument("--max-body-bytes", type=int, default=16 << 20, metavar="N",
                       help="413 beyond N bytes, compressed or not (default %(default)s)")
    serve.add_argument("--queue-spans", type=int, default=200_000, metavar="N",
                       help="spans waiting to be judged before requests get 503 (default %(default)s)")
    claims = commands.add_parser("claims", help="say whether an answer claims a completed action, and why",
                                 description="say whether each answer claims a completed action, and which "
                                 "clause and rule decided it")
    claims.add_argument("texts", nargs="+", metavar="TEXT", help="a final answer ('-' reads it from stdin)")
    claims.add_argument("--policy", metavar="P.toml", help="policy file (default: $OTEL_AGENTGUARD_POLICY, "
                        "else the built-in defaults)")
    claims.add_argument("--format", choices=("table", "json"), default="table")
    claims.add_argument("--compact", action="store_true", help="one-line JSON")
    examples = commands.add_parser(
        "examples", help="write the bundled example files (a policy, two labelled suites) into a folder",
        description="write the bundled example files into DIR (default: the current folder), to replay, check "
        "and edit: " + "; ".join(f"{name}: {about}" for name, about in EXAMPLE_FILES.items()))
    examples.add_argument("directory", nargs="?", default=".", metavar="DIR")
    examples.add_argument("--force", action="store_true", help="overwrite files of the same name")
    examples.add_argument("--list", action="store_true", help="name the files and what each is, write nothing")
    demo = add("demo", "run a small real agent under opentelemetry-instrument, replay its trace, check the suite", None)
    from otel_agentguard.demo.__main__ import add_arguments as add_demo_arguments

    add_demo_arguments(demo)
    parser.subcommands = dict(commands.choices)
    return parser


def run(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv:
        parser.print_help()
        return 0
    _Parser.argv = argv
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # said in the usage of the command they were given to
        parser.subcommands.get(args.command, parser).error(
            f"unrecognized argument{'s' if len(unknown) > 1 else ''}: {' '.join(unknown)}")
    if not os.environ.get(OTEL_AGENTGUARD_FINGERPRINT_KEY):
        # Raw arguments in input files are fingerprinted within this run only:
        # a fresh key is right, and not worth a warning.
        set_fingerprint_key(os.urandom(32))
    try:
        return COMMANDS[args.command](args)
    except (InputError, PolicyError, UsageError) as exc:
        print(f"agentguard: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `agentguard replay ... | head`
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:
        return 130
