"""Limits on untrusted text before it is parsed: size and nesting depth, with clear errors.

Python's `json.loads` (and PyYAML's composer) recurse once per nesting level, so a body of
`[[[[...` a few thousand deep raises `RecursionError`, which is not a `ValueError`: a handler
would treat it as a passing failure and retry it until SQS gives up, with no reason given.
`check_json_text` counts the depth with a loop (no recursion) first, so such a body is
refused at once, with the limit it broke.
"""

from __future__ import annotations

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
