"""YAML read with limits checked on the parser's events, before anything is built or expanded.

Every YAML respot reads from a researcher (job files, `--set` values, sweep files) goes
through `guarded_yaml`. PyYAML has two ways to make a small text cost without bound:
- **aliases**: `b: &b [*a, *a, ...]` nine levels deep is ~700 bytes that stands for 9^9
  items; composing it is cheap (aliases share one node), but everything that walks the result
  (our line map, pydantic, JSON) walks every copy: `respot run --check` hung;
- **nesting**: the composer recurses once per level, so `[[[[...` 5,000 deep is a
  `RecursionError` (a traceback, no field named).
`check_yaml_events` walks the parser's events (a loop, no recursion) and counts what the text
*stands for*: each alias adds the size and depth of what it names, as if expanded, so the
limits are judged without expanding anything. The walk stops at the first event over a limit,
so even a deep text costs only as many events as the limit allows. A recursive alias (one
naming a collection it is inside of) is refused too.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

MAX_YAML_DEPTH = 32  # hyperparameters nest at most 20 levels
MAX_YAML_NODES = 100_000  # every scalar, list and mapping, aliases counted as expanded
MAX_YAML_ALIASES = 1000
MAX_NUMBER_CHARS = 1000
_LONG_NUMBER = re.compile(
    r"[-+]?(?:0x[0-9a-fA-F_]+|0o[0-7_]+|0b[01_]+|[0-9_:.]+(?:[eE][-+]?[0-9]+)?)"
)


class YamlLimitError(ValueError):
    """YAML over a limit (depth, size as expanded, aliases); the message says which and where."""


def _where(event: yaml.Event, what: str, with_line: bool) -> str:
    mark = getattr(event, "start_mark", None)
    return f"{what}:{mark.line + 1}" if with_line and mark is not None else what


def check_yaml_events(
    text: str,
    *,
    what: str = "the YAML",
    max_depth: int = MAX_YAML_DEPTH,
    max_nodes: int = MAX_YAML_NODES,
    max_aliases: int = MAX_YAML_ALIASES,
    with_line: bool = True,
) -> None:
    """Raise `YamlLimitError` if `text`, with every alias expanded, would nest deeper than
    `max_depth`, hold more than `max_nodes` nodes, or use more than `max_aliases` aliases.
    Malformed YAML raises PyYAML's own error (with its line). Each message starts with
    `what` and, `with_line`, the line (`job.yaml:3: ...`)."""
    # One frame per open collection: [anchor, nodes counted when it opened, deepest below it]
    frames: list[list[Any]] = []
    anchors: dict[str, tuple[int, int]] = {}  # anchor -> (nodes, depth) of what it names
    nodes = aliases = 0

    def where(event: yaml.Event) -> str:
        return _where(event, what, with_line)

    def grow(size: int, depth: int, event: yaml.Event) -> None:
        nonlocal nodes
        nodes += size
        if nodes > max_nodes:
            raise YamlLimitError(
                f"{where(event)}: stands for more than {max_nodes:,} values once its "
                "aliases (*name) are expanded; write the values out, or fewer of them"
            )
        if len(frames) + depth > max_depth:
            raise YamlLimitError(
                f"{where(event)}: nested more than {max_depth} levels deep (aliases "
                "expanded); flatten it (hyperparameters nest at most 20)"
            )
        if frames:
            frames[-1][2] = max(frames[-1][2], depth)

    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, yaml.SequenceStartEvent | yaml.MappingStartEvent):
            grow(1, 1, event)
            frames.append([event.anchor, nodes, 0])
        elif isinstance(event, yaml.SequenceEndEvent | yaml.MappingEndEvent):
            anchor, opened, below = frames.pop()
            depth = below + 1
            if anchor is not None:
                anchors[anchor] = (nodes - opened + 1, depth)
            if frames:
                frames[-1][2] = max(frames[-1][2], depth)
        elif isinstance(event, yaml.ScalarEvent):
            grow(1, 0, event)
            plain = event.implicit[0] and len(event.value) > MAX_NUMBER_CHARS
            if plain and _LONG_NUMBER.fullmatch(event.value):
                # PyYAML would raise a bare ValueError (Python reads at most 4,300 digits).
                raise YamlLimitError(
                    f"{where(event)}: a number of {len(event.value):,} characters; write "
                    "it as text in quotes (hyperparameter integers fit 64 bits)"
                )
            if event.anchor is not None:
                anchors[event.anchor] = (1, 0)
        elif isinstance(event, yaml.AliasEvent):
            aliases += 1
            if aliases > max_aliases:
                raise YamlLimitError(
                    f"{where(event)}: more than {max_aliases:,} aliases (*name); write "
                    "the values out"
                )
            named = anchors.get(event.anchor or "")
            if named is None:
                raise YamlLimitError(
                    f"{where(event)}: the alias *{event.anchor} names no anchor written "
                    "before it, or the collection it is inside of; write the value out"
                )
            size, depth = named
            grow(size, depth, event)


def guarded_yaml(text: str, *, what: str = "the YAML", with_line: bool = True) -> Any:
    """`yaml.safe_load(text)` once `check_yaml_events` found it within the limits."""
    check_yaml_events(text, what=what, with_line=with_line)
    return yaml.safe_load(text)


__all__ = [
    "MAX_YAML_ALIASES",
    "MAX_YAML_DEPTH",
    "MAX_YAML_NODES",
    "YamlLimitError",
    "check_yaml_events",
    "guarded_yaml",
]
