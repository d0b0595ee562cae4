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
import stat
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from otel_agentguard.judge.policy import Policy
from otel_agentguard.replay._yaml import LineDict
from otel_agentguard.replay.agent_trace import AgentTraceCollector, is_agent_trace_record
from otel_agentguard.replay.errors import InputError
from otel_agentguard.replay.otlp import OTLPCollector, ReadSpan
from otel_agentguard.replay.recorded import RecordedSession
from otel_agentguard.replay.trajectory import is_trajectory_document, sessions_from_document

try:  # optional: parses OTLP lines 3-5x faster; every result is the stdlib's (see _loads_line)
    import orjson as _orjson
except ImportError:  # pragma: no cover - depends on the environment
    _orjson = None  # type: ignore[assignment]  # optional: callers check for None

_read_typed: Callable[[bytes, str], list[ReadSpan] | None] | None
try:  # optional: reads OTLP lines straight into spans, the reference reader's result (see its module)
    from otel_agentguard.replay._typed_otlp import read_line as _read_typed
except ImportError:  # pragma: no cover - depends on the environment
    _read_typed = None

# A bare integer orjson would read as a float (beyond 64 bits), as an object member or an array
# item: such lines go to the stdlib parser. (OTLP numbers are 64-bit; hex ids in strings never
# match.) The test is looser than that (after ":", "," or "[" and JSON whitespace, digits or
# dashes, 20 characters in all): a line it catches needlessly is only read more slowly. One
# search per separator: a literal first byte makes each far faster than one with a class.
_LONG_INTEGER_AFTER = tuple(
    re.compile(separator + rb"[ \t\r\n]*[-0-9]{20}").search for separator in (b":", b",", rb"\[")
)

MAX_DOCUMENT_BYTES = 64 << 20  # a whole-file JSON document; line formats stream instead
# A YAML document: reading it costs about half a second to a second and 13 MB of memory per MB
# on one core (bench/ section 7).
MAX_YAML_BYTES = 32 << 20
MAX_LINE_BYTES = 64 << 20
_READ_BUFFER = 1 << 20
_YAML_SUFFIXES = (".yaml", ".yml")


Progress = Callable[[int], None]  # told the bytes of line-format input read so far


def read_files(
    paths: Iterable[str | os.PathLike[str]],
    policy: Policy,
    progress: Progress | None = None,
    documents: dict[str, Any] | None = None,
) -> list[RecordedSession]:
    """All sessions in ``paths``, in file order; OTLP spans are pooled across files.

    ``progress``, when given, is called as line-format files are read with the bytes
    read so far (all files together); the CLI draws its progress bar from it.
    ``documents`` holds trajectory documents already parsed (by
    :func:`find_policy_reference`): they are taken from there, not parsed again.
    """
    otlp = OTLPCollector(policy)
    agent_trace = AgentTraceCollector(policy)
    sessions: list[RecordedSession] = []
    done = 0
    for path in paths:
        file = Path(path)
        report = None if progress is None else (lambda read, base=done: progress(base + read))
        sessions.extend(_read_one(file, otlp, agent_trace, policy, report, documents))
        if progress is not None:
            done += _size(file)
    return sessions + otlp.sessions() + agent_trace.sessions()


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


@dataclass(frozen=True)
class PolicyReference:
    """A trajectory file's ``policy:`` key: the file it names, resolved, and where it was named."""

    path: Path
    source: str  # the trajectory file
    line: int | None


def find_policy_reference(
    paths: Iterable[str | os.PathLike[str]], documents: dict[str, Any]
) -> PolicyReference | None:
    """The policy the first trajectory file that names one names (``policy: file.toml``).

    The name is relative to that file (an absolute path is refused: a data file must not
    point the reader anywhere on the machine). Documents parsed on the way are kept in
    ``documents`` for :func:`read_files`, so that no file is parsed twice.
    """
    for path in paths:
        file = Path(path)
        name = str(file)
        try:
            if not file.is_file():
                continue  # reading it reports the real problem
            if _is_document(file):
                document = documents[name] = _load_document(file)
            elif file.suffix.lower() == ".json":
                document = _first_record(file)  # a trajectory on one line names its policy too
            else:
                continue
        except OSError as exc:
            raise InputError(name, f"cannot read: {exc.strerror or exc}") from None
        if not isinstance(document, dict) or "policy" not in document:
            continue
        named = document["policy"]
        line = (getattr(document, "key_lines", None) or {}).get("policy")
        if not isinstance(named, str) or not named:
            raise InputError(name, f"policy: expected the name of a policy file, got {named!r:.40}", line)
        if Path(named).is_absolute():
            raise InputError(name, f"policy: {named!r} must be a path relative to this file", line)
        return PolicyReference(file.parent / named, name, line)
    return None


_SNIFF_BYTES = 1 << 20


def _first_record(path: Path) -> Any:
    """The first line of a JSON lines file when it is a small JSON object, else None."""
    with path.open("rb") as handle:
        first = handle.readline(_SNIFF_BYTES + 1)
    if len(first) > _SNIFF_BYTES:
        return None
    try:
        return json.loads(first)
    except (ValueError, RecursionError):
        return None  # reading the file reports it


def _read_one(
    path: Path,
    otlp: OTLPCollector,
    agent_trace: AgentTraceCollector,
    policy: Policy,
    progress: Progress | None = None,
    documents: dict[str, Any] | None = None,
) -> list[RecordedSession]:
    try:
        return _read_file(path, otlp, agent_trace, policy, progress, documents)
    except OSError as exc:  # unreadable (permissions, vanished): one line, no traceback
        raise InputError(str(path), f"cannot read: {exc.strerror or exc}") from None


def _read_file(
    path: Path,
    otlp: OTLPCollector,
    agent_trace: AgentTraceCollector,
    policy: Policy,
    progress: Progress | None = None,
    documents: dict[str, Any] | None = None,
) -> list[RecordedSession]:
    name = str(path)
    if documents and name in documents:
        return _from_document(documents.pop(name), name, 1, otlp, policy)
    if not path.is_file():
        raise InputError(name, "no such file" if not path.exists() else "not a regular file")
    if _is_document(path):
        document = _load_document(path)
        return _from_document(document, name, 1, otlp, policy)
    sessions: list[RecordedSession] = []
    read_typed = _read_typed
    for line_number, raw in _lines(path, progress):
        spans = read_typed(raw, name) if read_typed is not None else None
        if spans is not None:
            otlp.add_read_spans(spans, name, line_number)
            continue
        record = _parse_line(raw, name, line_number)
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


def _is_document(path: Path) -> bool:
    """Whether the file is one document (YAML, or JSON over several lines), not JSON lines."""
    return path.suffix.lower() in _YAML_SUFFIXES or _starts_multiline_json(path)


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
    except json.JSONDecodeError:
        return True
    except ValueError:
        return False  # a complete line with an unreadable number: reading it as JSON lines reports it
    return False


def _lines(path: Path, progress: Progress | None = None) -> Iterator[tuple[int, bytes]]:
    """The file's lines with their numbers, as read (blank lines skipped)."""
    name = str(path)
    read = 0
    # A large buffer: an exporter's lines are batches of hundreds of kilobytes, which the default
    # 8 KiB buffer would hand over in thousands of pieces to be joined.
    with path.open("rb", buffering=_READ_BUFFER) as handle:
        # Read at most one byte past the limit: a huge line is refused without being read whole.
        for number, raw in enumerate(iter(lambda: handle.readline(MAX_LINE_BYTES + 1), b""), start=1):
            if progress is not None:
                read += len(raw)
                progress(read)
            if len(raw) > MAX_LINE_BYTES:
                raise InputError(name, f"line longer than {MAX_LINE_BYTES} bytes", number)
            if not raw.isspace():
                yield number, raw  # as read: stripping would copy a line of megabytes


def _parse_line(raw: bytes, name: str, number: int) -> Any:
    try:
        return _loads_line(raw)
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
    if _orjson is not None and not any(search(text) for search in _LONG_INTEGER_AFTER):
        try:
            return _orjson.loads(text)  # JSON whitespace around the value (the newline) is allowed
        except ValueError:  # orjson.JSONDecodeError: let the stdlib decide and word the error
            pass
    return json.loads(text.strip())  # stripped: error columns count from the first character


def _load_document(path: Path) -> Any:
    name = str(path)
    is_yaml = path.suffix.lower() in _YAML_SUFFIXES
    limit = MAX_YAML_BYTES if is_yaml else MAX_DOCUMENT_BYTES
    with path.open("rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise InputError(name, "not a regular file")
        if info.st_size > limit:
            raise InputError(name, f"{'YAML' if is_yaml else 'JSON'} document larger than {limit:,} bytes "
                             f"({info.st_size:,}): split it, or write JSON lines")
        raw = handle.read(limit + 1)  # the file may have grown since: read no more than the limit
    if len(raw) > limit:
        raise InputError(name, f"document larger than {limit:,} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(name, f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    del raw
    if is_yaml:
        from otel_agentguard.replay._yaml import load_yaml

        return load_yaml(text, name)
    try:
        document = json.loads(text)
    except RecursionError:
        raise InputError(name, "JSON nested too deeply") from None
    except json.JSONDecodeError as exc:
        raise InputError(name, f"invalid JSON: {exc.msg} (column {exc.colno})", exc.lineno) from None
    except ValueError as exc:  # a number Python will not read (an integer of 5,000 digits)
        found = _LONG_DIGITS.search(text)
        line = text.count("\n", 0, found.start()) + 1 if found else None
        raise InputError(name, f"invalid JSON: {_json_reason(exc)}", line) from None
    if isinstance(document, dict) and "policy" in document:
        # Remember where the policy is named, for errors about it.
        found = re.search(r'"policy"\s*:', text)
        document = LineDict(document)
        document.key_lines = {"policy": text.count("\n", 0, found.start()) + 1} if found else {}
    return document


_LONG_DIGITS = re.compile(r"[0-9]{4301,}")


def _json_reason(exc: ValueError) -> str:
    if isinstance(exc, json.JSONDecodeError):
        return f"{exc.msg} (column {exc.colno})"
    if "digits" in str(exc):
        return "an integer of more than 4,300 digits"
    return str(exc).splitlines()[0][:120]
