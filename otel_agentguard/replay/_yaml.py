"""Safe YAML for trajectory files: no object construction, lines kept for errors."""

from __future__ import annotations

from typing import Any

from otel_agentguard.replay.errors import InputError

_MAX_DEPTH = 64
_MAX_EXPANDED_VALUES = 2_000_000


class LineDict(dict):  # type: ignore[type-arg]
    """A mapping that remembers the YAML line it started on (for error messages)."""

    line: int | None = None


def load_yaml(text: str, path: str) -> Any:
    try:
        import yaml
    except ImportError:
        raise InputError(path, "reading YAML needs PyYAML: pip install 'otel-agentguard[yaml]'") from None

    class _LineLoader(yaml.SafeLoader):
        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            mapping = LineDict(super().construct_mapping(node, deep=deep))
            mapping.line = node.start_mark.line + 1
            return mapping

        def compose_node(self, parent: Any, index: Any) -> Any:
            # Bound the nesting depth before anything is built.
            self._depth = getattr(self, "_depth", 0) + 1
            try:
                if self._depth > _MAX_DEPTH:
                    mark = self.peek_event().start_mark
                    raise InputError(path, f"YAML nested deeper than {_MAX_DEPTH} levels", mark.line + 1)
                return super().compose_node(parent, index)
            finally:
                self._depth -= 1

    _LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _LineLoader.construct_mapping)
    try:
        document = yaml.load(text, Loader=_LineLoader)  # noqa: S506 - a SafeLoader subclass
    except InputError:
        raise
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        raise InputError(path, f"invalid YAML: {exc.problem or exc.context}", line) from None
    except yaml.YAMLError as exc:
        raise InputError(path, f"invalid YAML: {exc}") from None
    except (ValueError, OverflowError) as exc:  # a scalar the safe constructors reject (2001-02-30)
        raise InputError(path, f"invalid YAML value: {exc}") from None
    if not _expands_within(document, _MAX_EXPANDED_VALUES):
        raise InputError(path, f"YAML expands to more than {_MAX_EXPANDED_VALUES:,} values (nested aliases?)")
    return document


def _expands_within(document: Any, limit: int) -> bool:
    """Count values as a reader sees them, aliases expanded, stopping at ``limit``.

    Aliases share objects, so a tiny file can stand for billions of values
    ("billion laughs"); everything downstream walks the expanded form.
    """
    pending = [document]
    seen = 0
    while pending:
        value = pending.pop()
        seen += 1
        if seen > limit:
            return False
        if isinstance(value, dict):
            pending.extend(value.keys())
            pending.extend(value.values())
        elif isinstance(value, list):
            pending.extend(value)
    return True
