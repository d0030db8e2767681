"""Limits on untrusted text before it is parsed: size and nesting depth, with clear errors.

Python's `json.loads` (and PyYAML's composer) recurse once per nesting level, so a body of
`[[[[...` a few thousand deep raises `RecursionError`, which is not a `ValueError`: a handler
would treat it as a passing failure and retry it until SQS gives up, with no reason given.
`check_json_text` counts the depth with a loop (no recursion) first, so such a body is
refused at once, with the limit it broke.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator

from respot.exceptions import RespotError

MAX_JSON_DEPTH = 64  # a submission nests ~8 deep; hyperparameters are capped at 20 levels
MAX_BODY_BYTES = 256 * 1024  # SNS and SQS refuse more


class InputLimitError(RespotError, ValueError):
    """Input over a size or depth limit; the message names the limit and the fix."""


def json_depth(text: str) -> int:
    """The deepest nesting of `[`/`{` in JSON text (brackets inside strings do not count)."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
            continue
        if ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


def check_json_text(
    text: str | bytes,
    *,
    what: str = "message body",
    max_bytes: int = MAX_BODY_BYTES,
    max_depth: int = MAX_JSON_DEPTH,
) -> str:
    """`text` as str if it is within `max_bytes` and nests at most `max_depth` deep."""
    size = len(text) if isinstance(text, bytes) else len(text.encode("utf-8", "replace"))
    if size > max_bytes:
        raise InputLimitError(f"the {what} is {size:,} bytes; at most {max_bytes:,} are accepted")
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    depth = json_depth(text)
    if depth > max_depth:
        raise InputLimitError(
            f"the {what} nests {depth} levels deep; at most {max_depth} are accepted"
        )
    return text


# ---- free text that reaches a record --------------------------------------------------------
# A job record is one DynamoDB item (at most 400 KB) and a reason is written into it more than
# once (the record's reason, the timeline's text and data, Slack). Free text from outside
# (a cancel's reason, an agent's failure and log tail, a sweep's trial news) is cut to these
# bounds where it is parsed, with a marker saying how much was cut, so a cancel always lands.
MAX_REASON_CHARS = 2000
MAX_LOG_LINES = 50
MAX_LOG_LINE_CHARS = 500
TRUNCATION_MARKER = " [... {cut:,} more characters cut by respot]"


def truncate_text(text: str, max_chars: int = MAX_REASON_CHARS, *, keep_end: bool = False) -> str:
    """`text` if it has at most `max_chars` characters; else its start (or, `keep_end`, its
    end: a log line's end is what says what failed) and a marker saying how much was cut."""
    if len(text) <= max_chars:
        return text
    keep = max(0, max_chars - len(TRUNCATION_MARKER.format(cut=len(text))))
    marker = TRUNCATION_MARKER.format(cut=len(text) - keep)
    if keep_end:
        return marker.strip() + " " + text[len(text) - keep :]
    return text[:keep] + marker


def _bounded_text(value: Any) -> Any:
    return truncate_text(value) if isinstance(value, str) else value


def _bounded_lines(value: Any) -> Any:
    """The last MAX_LOG_LINES lines, each cut to MAX_LOG_LINE_CHARS (a log's end matters)."""
    if not isinstance(value, list):
        return value
    kept = value[-MAX_LOG_LINES:]
    return [
        truncate_text(v, MAX_LOG_LINE_CHARS, keep_end=True) if isinstance(v, str) else v
        for v in kept
    ]


BoundedText = Annotated[str, BeforeValidator(_bounded_text)]
"""A `str` field of free text from outside, cut to MAX_REASON_CHARS with a marker."""

BoundedLines = Annotated[list[str], BeforeValidator(_bounded_lines)]
"""A log tail from outside: its last MAX_LOG_LINES lines, each cut to MAX_LOG_LINE_CHARS."""
