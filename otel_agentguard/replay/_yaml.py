"""Safe YAML for trajectory files: plain data only, built straight from the parser's events.

No node tree is composed and nothing is constructed but mappings, lists and the
plain scalar types (text, numbers, booleans, null, timestamps, binary): a tag
that would build anything else is an error. Building from the event stream keeps
a 10 MB file to seconds and about ten times its size in memory, where composing
PyYAML's node graph first costs gigabytes. The libyaml parser is used when PyYAML
has it, else PyYAML's own.

Every value counts against a budget, an alias once more for each value it stands
for, so a small file cannot expand to billions of values ("billion laughs"), and
nesting is bounded in depth. Mappings remember the line they start on.
"""

from __future__ import annotations

from typing import Any

from otel_agentguard.replay.errors import InputError

MAX_DEPTH = 64
MAX_VALUES = 6_000_000  # scalars, mappings and lists, aliases expanded

_MAP = "tag:yaml.org,2002:map"
_SEQ = "tag:yaml.org,2002:seq"
_STR = "tag:yaml.org,2002:str"
_MERGE = "tag:yaml.org,2002:merge"
_SCALAR_TAGS = frozenset({
    "tag:yaml.org,2002:null", "tag:yaml.org,2002:bool", "tag:yaml.org,2002:int", "tag:yaml.org,2002:float",
    _STR, "tag:yaml.org,2002:binary", "tag:yaml.org,2002:timestamp",
})


class LineDict(dict[Any, Any]):
    """A mapping that remembers the YAML line it started on (for error messages)."""

    __slots__ = ("line", "key_lines")

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.line: int | None = None
        self.key_lines: dict[str, int] | None = None  # the top-level mapping's key -> line


class _Frame:
    """A mapping or list being built."""

    __slots__ = ("value", "is_mapping", "key", "has_key", "anchor", "first_count", "merges")

    def __init__(self, value: Any, is_mapping: bool, anchor: str | None, first_count: int):
        self.value = value
        self.is_mapping = is_mapping
        self.key: Any = None
        self.has_key = False
        self.anchor = anchor
        self.first_count = first_count
        self.merges: list[Any] | None = None


def load_yaml(text: str, path: str) -> Any:
    """The one document in ``text``; :class:`InputError` names ``path`` and the line."""
    try:
        import yaml
    except ImportError:
        raise InputError(path, "reading YAML needs PyYAML: pip install 'otel-agentguard[yaml]'") from None
    loader_class = getattr(yaml, "CSafeLoader", None) or yaml.SafeLoader
    loader = loader_class(text)
    try:
        return _build(loader, path, yaml)
    except InputError:
        raise
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        raise InputError(path, f"invalid YAML: {exc.problem or exc.context}", line) from None
    except yaml.YAMLError as exc:
        raise InputError(path, f"invalid YAML: {exc}") from None
    finally:
        loader.dispose()


def _build(loader: Any, path: str, yaml: Any) -> Any:
    events = yaml.events
    scalar_event, alias_event = events.ScalarEvent, events.AliasEvent
    mapping_start, sequence_start = events.MappingStartEvent, events.SequenceStartEvent
    ends = (events.MappingEndEvent, events.SequenceEndEvent)
    document_start = events.DocumentStartEvent
    node_class = yaml.nodes.ScalarNode
    resolve = loader.resolve
    constructors = loader.yaml_constructors
    stack: list[_Frame] = []
    anchors: dict[str, tuple[Any, int]] = {}  # anchor -> (value, how many values it stands for)
    documents = 0
    count = 0
    root: Any = None
    while True:
        event = loader.get_event()
        if event is None:
            break
        kind = type(event)
        if kind is scalar_event:
            count += 1
            tag = event.tag
            if tag is None or tag == "!":
                tag = resolve(node_class, event.value, event.implicit)
            if tag == _STR:
                value: Any = event.value
            elif tag == _MERGE:  # "<<": a merge as a mapping key, else just the text
                in_key = bool(stack) and stack[-1].is_mapping and not stack[-1].has_key
                value = _MergeKey if in_key else event.value
            elif tag in _SCALAR_TAGS:
                node = node_class(tag, event.value, event.start_mark, event.end_mark, event.style)
                try:
                    value = constructors[tag](loader, node)
                except (ValueError, OverflowError, TypeError, yaml.YAMLError) as exc:
                    # a scalar the safe constructors refuse: 2001-02-30, an integer of 5,000 digits
                    reason = getattr(exc, "problem", None) or str(exc).splitlines()[0][:120]
                    if "digits" in reason:  # Python's own wording names a setting the user cannot change
                        reason = "an integer of more than 4,300 digits"
                    raise InputError(
                        path, f"invalid YAML value {_short(event.value)}: {reason}", _line(event)) from None
            else:
                raise InputError(path, f"YAML tag {tag} is not allowed (plain data only)", _line(event))
            size = 1
            if event.anchor is not None:
                anchors[event.anchor] = (value, 1)
        elif kind is mapping_start or kind is sequence_start:
            count += 1
            tag = event.tag
            if tag not in (None, "!", _MAP if kind is mapping_start else _SEQ):
                raise InputError(path, f"YAML tag {tag} is not allowed (plain data only)", _line(event))
            if len(stack) >= MAX_DEPTH:
                raise InputError(path, f"YAML nested deeper than {MAX_DEPTH} levels", _line(event))
            if kind is mapping_start:
                mapping = LineDict()
                mapping.line = _line(event)
                if not stack:
                    mapping.key_lines = {}
                stack.append(_Frame(mapping, True, event.anchor, count))
            else:
                stack.append(_Frame([], False, event.anchor, count))
            if count > MAX_VALUES:
                raise _over_budget(path, event, anchors)
            continue
        elif kind in ends:
            frame = stack.pop()
            value = frame.value
            if frame.merges:
                _merge(value, frame.merges, path, event)
            size = count - frame.first_count + 1
            if frame.anchor is not None:
                anchors[frame.anchor] = (value, size)
        elif kind is alias_event:
            found = anchors.get(event.anchor)
            if found is None:
                raise InputError(path, f"YAML alias *{event.anchor} names no complete anchor before it", _line(event))
            value, size = found
            count += size
        elif kind is document_start:
            documents += 1
            if documents > 1:
                raise InputError(path, "more than one YAML document in the file (one is expected)", _line(event))
            continue
        else:
            continue
        if count > MAX_VALUES:
            raise _over_budget(path, event, anchors)
        if not stack:
            root = value
            continue
        frame = stack[-1]
        if not frame.is_mapping:
            frame.value.append(value)
        elif not frame.has_key:
            frame.key, frame.has_key = value, True
            if frame.value.key_lines is not None and isinstance(value, str):
                frame.value.key_lines.setdefault(value, _line(event))
        else:
            frame.has_key = False
            key = frame.key
            if key is _MergeKey:
                frame.merges = (frame.merges or []) + (value if isinstance(value, list) else [value])
                continue
            try:
                frame.value[key] = value
            except TypeError:
                raise InputError(path, "a YAML mapping key must be text, a number or a boolean, not a "
                                 f"{type(key).__name__}", _line(event)) from None
    return root


class _MergeKey:
    """The ``<<`` key: its mappings fill in the keys the mapping does not set itself."""


def _merge(mapping: dict[Any, Any], sources: list[Any], path: str, event: Any) -> None:
    for source in sources:
        if not isinstance(source, dict):
            raise InputError(path, "a YAML merge key (<<) needs a mapping or a list of mappings", _line(event))
        for key, value in source.items():
            mapping.setdefault(key, value)


def _over_budget(path: str, event: Any, anchors: dict[str, tuple[Any, int]]) -> InputError:
    through = " (aliases count once for every value they repeat)" if anchors else ""
    return InputError(
        path, f"YAML document holds more than {MAX_VALUES:,} values{through}: split it into several files",
        _line(event),
    )


def _line(event: Any) -> int:
    line: int = event.start_mark.line
    return line + 1


def _short(text: str) -> str:
    return repr(text) if len(text) <= 40 else f"of {len(text):,} characters"
