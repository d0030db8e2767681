"""A small IAM policy evaluator for the conditions moto does not evaluate.

It answers "would these identity policies allow this request?" with IAM's rules for what
respot's policies use: an explicit Deny wins; otherwise some Allow must match the action,
the resource and every condition. Wildcards `*` and `?` in actions, resources and
`*Like` values; condition operators StringEquals/StringNotEquals/StringLike/StringNotLike,
ArnEquals/ArnLike/ArnNotEquals/ArnNotLike, Bool, NumericLessThanEquals/GreaterThanEquals,
each with the `IfExists` suffix, and `Null` (`"true"`: the request lacks the key); several
values of one key are OR-ed, keys and operators are AND-ed. A key missing from the request
fails a positive operator (as in IAM). Policy variables (`${aws:userid}`, and the literal
`${*}`, `${?}`, `${$}`) in resources and condition values take the request's value; one the
request lacks matches nothing. It is used by tests against the synthesized template
(`tests/infra/test_iam_policies.py`) and by the local runtime's enforcement
(`infra/local/iam.py`: conditional Denies and session policies).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping, Sequence
from typing import Any


def _list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else [value]


def _glob(pattern: str, value: str, *, case: bool = True) -> bool:
    regex = fnmatch.translate(pattern)
    return re.match(regex, value, 0 if case else re.IGNORECASE) is not None


_VARIABLE = re.compile(r"\$\{([^}]+)\}")
_LITERALS = {"*": "*", "?": "?", "$": "$"}


def _substitute(value: Any, context: Mapping[str, Any]) -> str | None:
    """`value` with its policy variables replaced from `context`; None if one is missing."""
    text = str(value)
    missing = False

    def one(match: re.Match[str]) -> str:
        nonlocal missing
        name = match.group(1)
        if name in _LITERALS:
            return _LITERALS[name]
        if name not in context:
            missing = True
            return ""
        return str(_list(context[name])[0])

    resolved = _VARIABLE.sub(one, text)
    return None if missing else resolved


def _resolved(values: Any, context: Mapping[str, Any]) -> list[str]:
    return [v for v in (_substitute(p, context) for p in _list(values)) if v is not None]


def _matches(patterns: Any, value: str, *, case: bool = True) -> bool:
    return any(_glob(str(p), value, case=case) for p in _list(patterns))


def _condition(operator: str, key: str, expected: Any, context: Mapping[str, Any]) -> bool:
    if operator == "Null":  # "true": the request has no such key; "false": it has one
        return any((key not in context) == (str(v).lower() == "true") for v in _list(expected))
    if_exists = operator.endswith("IfExists")
    op = operator.removesuffix("IfExists")
    if key not in context:
        return if_exists or op.startswith(("StringNot", "ArnNot"))
    actual = [str(v) for v in _list(context[key])]
    values = _resolved(expected, context)
    negated = "Not" in op
    if op in ("StringEquals", "StringNotEquals", "ArnEquals", "ArnNotEquals"):
        hit = any(a == v for a in actual for v in values)
    elif op in ("StringLike", "StringNotLike", "ArnLike", "ArnNotLike"):
        hit = any(_glob(v, a) for a in actual for v in values)
    elif op == "Bool":
        hit = any(a.lower() == v.lower() for a in actual for v in values)
    elif op == "NumericLessThanEquals":
        hit = any(float(a) <= float(v) for a in actual for v in values)
    elif op == "NumericGreaterThanEquals":
        hit = any(float(a) >= float(v) for a in actual for v in values)
    else:
        raise ValueError(f"condition operator {operator} is not supported by this evaluator")
    return not hit if negated else hit


def _statement_applies(
    st: Mapping[str, Any], action: str, resource: str, context: Mapping[str, Any]
) -> bool:
    if "Action" in st and not _matches(st["Action"], action, case=False):
        return False
    if "NotAction" in st and _matches(st["NotAction"], action, case=False):
        return False
    if "Resource" in st and not _matches(_resolved(st["Resource"], context), resource):
        return False
    if "NotResource" in st and _matches(_resolved(st["NotResource"], context), resource):
        return False
    for operator, keys in (st.get("Condition") or {}).items():
        for key, expected in keys.items():
            if not _condition(operator, key, expected, context):
                return False
    return True


def allowed(
    documents: Sequence[Mapping[str, Any]],
    action: str,
    resource: str,
    context: Mapping[str, Any] | None = None,
) -> bool:
    """True if the identity policies `documents` allow `action` on `resource` in `context`."""
    context = context or {}
    allow = False
    for doc in documents:
        statements = doc.get("Statement", [])
        for st in _list(statements):
            if not _statement_applies(st, action, resource, context):
                continue
            if st.get("Effect") == "Deny":
                return False
            allow = True
    return allow
