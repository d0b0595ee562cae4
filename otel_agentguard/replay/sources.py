"""Read replay inputs of any supported format into sessions.

The format is told by content, not by name: OTLP JSON lines
(``resourceSpans``), agent-trace event lines (``session_id`` + ``event``), or a
trajectory document (``sessions`` / ``steps``) in YAML or JSON. Every problem is
an :class:`InputError` naming the file and line; nothing is ever executed
(YAML is read with a safe loader) and documents are bounded in size and depth.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from otel_agentguard.policy import Policy
from otel_agentguard.replay.agent_trace import AgentTraceCollector, is_agent_trace_record
from otel_agentguard.replay.errors import InputError
from otel_agentguard.replay.otlp import OTLPCollector
from otel_agentguard.replay.recorded import RecordedSession
from otel_agentguard.replay.trajectory import is_trajectory_document, sessions_from_document

try:  # optional: parses OTLP lines 3-5x faster; every result is the stdlib's (see _loads_line)
    import orjson as _orjson
except ImportError:  # pragma: no cover - depends on the environment
    _orjson = None

# A bare integer orjson would read as a float (beyond 64 bits) as an object member: such
# lines go to the stdlib parser. (OTLP numbers are 64-bit; hex ids in strings never match.)
_LONG_INTEGER = re.compile(rb":[ ]?(?:[0-9]{20}|-[0-9]{19})")

MAX_DOCUMENT_BYTES = 64 << 20  # a whole-file trajectory document; line formats stream instead
MAX_LINE_BYTES = 64 << 20
_YAML_SUFFIXES = (".yaml", ".yml")


Progress = Callable[[int], None]  # told the bytes of line-format input read so far


def read_files(
    paths: Iterable[str | os.PathLike[str]], policy: Policy, progress: Progress | None = None
) -> list[RecordedSession]:
    """All sessions in ``paths``, in file order; OTLP spans are pooled across files.

    ``progress``, when given, is called as line-format files are read with the bytes
    read so far (all files together); the CLI draws its progress bar from it.
    """
    otlp = OTLPCollector(policy)
    agent_trace = AgentTraceCollector(policy)
    sessions: list[RecordedSession] = []
    done = 0
    for path in paths:
        file = Path(path)
        report = None if progress is None else (lambda read, base=done: progress(base + read))
        sessions.extend(_read_one(file, otlp, agent_trace, policy, report))
        if progress is not None:
            done += _size(file)
    return sessions + otlp.sessions() + agent_trace.sessions()


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def trajectory_policy_path(path: str | os.PathLike[str]) -> Path | None:
    """The policy a trajectory file names (``policy: file.toml``), relative to it."""
    file = Path(path)
    try:
        if file.suffix.lower() not in _YAML_SUFFIXES + (".json",) or not file.is_file():
            return None  # reading it reports the real problem
        document = _load_document(file)
    except (InputError, OSError):
        return None
    name = document.get("policy") if isinstance(document, dict) else None
    return (file.parent / name) if isinstance(name, str) else None


def _read_one(
    path: Path, otlp: OTLPCollector, agent_trace: AgentTraceCollector, policy: Policy, progress: Progress | None = None
) -> list[RecordedSession]:
    try:
        return _read_file(path, otlp, agent_trace, policy, progress)
    except OSError as exc:  # unreadable (permissions, vanished): one line, no traceback
        raise InputError(str(path), f"cannot read: {exc.strerror or exc}") from None


def _read_file(
    path: Path, otlp: OTLPCollector, agent_trace: AgentTraceCollector, policy: Policy, progress: Progress | None = None
) -> list[RecordedSession]:
    name = str(path)
    if not path.is_file():
        raise InputError(name, "no such file" if not path.exists() else "not a regular file")
    if path.suffix.lower() in _YAML_SUFFIXES or _starts_multiline_json(path):
        document = _load_document(path)
        return _from_document(document, name, 1, otlp, policy)
    sessions: list[RecordedSession] = []
    for line_number, record in _json_lines(path, progress):
        if isinstance(record, dict) and "resourceSpans" in record:
            otlp.add_document(record, name, line_number)
        elif is_agent_trace_record(record):
            agent_trace.add_record(record, name, line_number)
        else:
            sessions.extend(_from_document(record, name, line_number, otlp, policy))
    return sessions


def _from_document(document: Any, path: str, line: int, otlp: OTLPCollector, policy: Policy) -> list[RecordedSession]:
    if isinstance(document, dict) and "resourceSpans" in document:
        otlp.add_document(document, path, line)
        return []
    if document is None:
        return []  # an empty document holds no session
    if is_trajectory_document(document):
        unknown = set(document) - {"sessions", "steps", "policy", "id", "title", "profile", "task_type",
                                   "expect", "error", "interrupt"}
        if unknown:
            raise InputError(path, f"unknown top-level key {sorted(unknown)[0]!r}", getattr(document, "line", line))
        return sessions_from_document(document, path, policy)
    raise InputError(
        path,
        "not a recognised format (expected OTLP JSON lines, agent-trace JSON lines or a trajectory "
        "document with 'sessions' or 'steps')",
        line,
    )


def _starts_multiline_json(path: Path) -> bool:
    """A JSON document spread over lines (pretty-printed) rather than JSON lines."""
    with path.open("rb") as handle:
        first = handle.readline(MAX_LINE_BYTES).strip()
    if not first.startswith((b"{", b"[")):
        return False
    try:
        json.loads(first)
    except RecursionError:
        return False  # one very deep line: reading it as JSON lines reports it
    except ValueError:
        return True
    return False


def _json_lines(path: Path, progress: Progress | None = None) -> Iterator[tuple[int, Any]]:
    name = str(path)
    read = 0
    with path.open("rb") as handle:
        # Read at most one byte past the limit: a huge line is refused without being read whole.
        for number, raw in enumerate(iter(lambda: handle.readline(MAX_LINE_BYTES + 1), b""), start=1):
            if progress is not None:
                read += len(raw)
                progress(read)
            if len(raw) > MAX_LINE_BYTES:
                raise InputError(name, f"line longer than {MAX_LINE_BYTES} bytes", number)
            text = raw.strip()
            if not text:
                continue
            try:
                yield number, _loads_line(text)
            except RecursionError:
                raise InputError(name, "JSON nested too deeply", number) from None
            except ValueError as exc:
                raise InputError(name, f"invalid JSON: {_json_reason(exc)}", number) from None


def _loads_line(text: bytes) -> Any:
    """``json.loads`` of one line, through orjson when it is installed and agrees.

    orjson rejects some inputs the stdlib reads (NaN, lone surrogates, a BOM, numbers
    beyond double range) and reads integers beyond 64 bits as floats: those lines,
    and every line orjson fails on, are parsed by the stdlib, so the values and the
    error messages are always the stdlib's.
    """
    if _orjson is not None and _LONG_INTEGER.search(text) is None:
        try:
            return _orjson.loads(text)
        except ValueError:  # orjson.JSONDecodeError: let the stdlib decide and word the error
            pass
    return json.loads(text)


def _load_document(path: Path) -> Any:
    name = str(path)
    size = path.stat().st_size
    if size > MAX_DOCUMENT_BYTES:
        raise InputError(name, f"document larger than {MAX_DOCUMENT_BYTES} bytes")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(name, f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    if path.suffix.lower() in _YAML_SUFFIXES:
        from otel_agentguard.replay._yaml import load_yaml

        return load_yaml(text, name)
    try:
        return json.loads(text)
    except RecursionError:
        raise InputError(name, "JSON nested too deeply") from None
    except json.JSONDecodeError as exc:
        raise InputError(name, f"invalid JSON: {exc.msg} (column {exc.colno})", exc.lineno) from None


def _json_reason(exc: ValueError) -> str:
    if isinstance(exc, json.JSONDecodeError):
        return f"{exc.msg} (column {exc.colno})"
    return str(exc)
