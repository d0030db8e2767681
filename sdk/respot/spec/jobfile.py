"""Job files: a `TrainingEnvVar` written as YAML, with errors that point at the line and field.

    job = load_job_file("job.yaml", overrides=["hyperparameters.lr=0.01"])

The file is the same model as `TrainingEnvVar` (same fields, same checks: `validate_spec`);
this module only adds what a file needs:
- every problem names `<file>:<line>: <field>: <what is wrong and how to fix it>`; the line
  comes from PyYAML's node tree (`yaml.compose`), so it is the line the field is written on;
- malformed YAML (a tab, a bad indent) is reported at the YAML error's own line and column;
- a key given twice is an error (PyYAML alone would keep the last one silently);
- `source_dir` is relative to the file's directory, so `respot run some/dir/job.yaml` works
  from anywhere;
- `--set a.b=value` overrides, each value read as a YAML scalar or flow collection
  (`--set instance_types=[g5.xlarge]`, `--set hyperparameters.lr=0.01`); a problem in an
  overridden field names the `--set` it came from.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from respot.exceptions import SpecError
from respot.spec.training import TrainingEnvVar, validate_spec
from respot.spec.yamlguard import YamlLimitError, check_yaml_events, guarded_yaml

FieldPath = tuple[str | int, ...]

# "data[0].s3_uri: ..." -> the field path before the first ": ".
_PROBLEM = re.compile(r"(?P<path>[A-Za-z_][\w-]*(?:\[\d+\]|\.[\w-]+)*): (?P<text>.*)", re.DOTALL)
_PATH_PART = re.compile(r"\[(\d+)\]|\.?([^.\[\]]+)")
_QUOTED = re.compile(r"'((?:[^'\\]|\\.)*)'")


class JobFileError(SpecError):
    """A job file cannot be read, or describes an invalid job; each problem has its line."""


@dataclass(frozen=True)
class Override:
    """One `--set path=value`."""

    path: FieldPath
    value: Any
    text: str


@dataclass(frozen=True)
class JobFile:
    """A validated job file: the spec, and where each field was written."""

    path: Path
    spec: TrainingEnvVar
    data: dict[str, Any]
    lines: dict[FieldPath, int]


def parse_path(text: str) -> FieldPath:
    """`data[0].s3_uri` -> ("data", 0, "s3_uri")."""
    parts: list[str | int] = []
    pos = 0
    for m in _PATH_PART.finditer(text):
        if m.start() != pos:
            break
        parts.append(int(m.group(1)) if m.group(1) is not None else m.group(2))
        pos = m.end()
    if pos != len(text) or not parts or not isinstance(parts[0], str):
        raise ValueError(f"{text!r} is not a field path; write e.g. 'hyperparameters.lr'")
    return tuple(parts)


def format_path(path: FieldPath) -> str:
    """("data", 0, "s3_uri") -> `data[0].s3_uri`."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else part
    return out


def parse_override(text: str) -> Override:
    """`a.b=value`: the value is read as YAML (`0.01` a number, `[a, b]` a list, `x` text)."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise JobFileError([f"--set {text!r}: write key=value, e.g. --set hyperparameters.lr=0.01"])
    try:
        path = parse_path(key.strip())
    except ValueError as exc:
        raise JobFileError([f"--set {text!r}: {exc}"]) from None
    try:
        value = guarded_yaml(raw, what=f"--set {text!r}", with_line=False) if raw.strip() else ""
    except YamlLimitError as exc:
        raise JobFileError([str(exc)]) from None
    except yaml.YAMLError as exc:
        raise JobFileError(
            [f"--set {text!r}: the value is not valid YAML ({_yaml_reason(exc)})"]
        ) from None
    return Override(path, value, text)


def apply_override(data: dict[str, Any], override: Override) -> None:
    """Set `override.value` at its path in `data`, creating mappings on the way."""
    target: Any = data
    path = override.path
    for i, part in enumerate(path[:-1]):
        nxt = path[i + 1]
        if isinstance(part, int):
            if not isinstance(target, list) or part >= len(target):
                raise JobFileError(
                    [f"--set {override.text}: {format_path(path[: i + 1])} does not exist"]
                )
            target = target[part]
            continue
        if not isinstance(target, dict):
            raise JobFileError([f"--set {override.text}: {format_path(path[:i])} is not a mapping"])
        if part not in target or target[part] is None:
            target[part] = [] if isinstance(nxt, int) else {}
        target = target[part]
    last = path[-1]
    if isinstance(last, int):
        if not isinstance(target, list) or last > len(target):
            raise JobFileError([f"--set {override.text}: {format_path(path)} does not exist"])
        if last == len(target):
            target.append(override.value)
        else:
            target[last] = override.value
    elif isinstance(target, dict):
        target[last] = override.value
    else:
        raise JobFileError([f"--set {override.text}: {format_path(path[:-1])} is not a mapping"])


def _yaml_reason(exc: yaml.YAMLError) -> str:
    problem = getattr(exc, "problem", None) or str(exc)
    context = getattr(exc, "context", None)
    return f"{context}, {problem}" if context else str(problem)


def _mark_line(node: yaml.Node) -> int:
    return int(node.start_mark.line) + 1


def _map_lines(
    node: yaml.Node, path: FieldPath, lines: dict[FieldPath, int], problems: list[str], name: str
) -> None:
    """Record the line of every key and item under `node`; report keys given twice."""
    if isinstance(node, yaml.MappingNode):
        seen: dict[Any, int] = {}
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else str(key_node.value)
            line = _mark_line(key_node)
            sub = (*path, key)
            if key in seen:
                problems.append(
                    f"{name}:{line}: {format_path(sub)}: given twice (first on line {seen[key]}); "
                    "keep one"
                )
            seen[key] = line
            lines[sub] = line
            _map_lines(value_node, sub, lines, problems, name)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            sub = (*path, i)
            lines[sub] = _mark_line(item)
            _map_lines(item, sub, lines, problems, name)


def _refine(path: FieldPath, text: str, data: dict[str, Any]) -> FieldPath:
    """A problem on a whole list or mapping that quotes one of its items: point at that item."""
    value: Any = data
    for part in path:
        try:
            value = value[part]
        except (KeyError, IndexError, TypeError):
            return path
    quoted = [m.group(1) for m in _QUOTED.finditer(text)]
    if not quoted:
        return path
    if isinstance(value, list):
        for i, item in enumerate(value):
            if isinstance(item, str) and item == quoted[0]:
                return (*path, i)
    elif isinstance(value, dict):
        for key in value:
            if isinstance(key, str) and quoted[0] == key:
                return (*path, key)
    return path


def locate(
    problems: list[str],
    *,
    name: str,
    data: dict[str, Any],
    lines: dict[FieldPath, int],
    overrides: Sequence[Override] = (),
) -> list[str]:
    """Prefix each `field: text` problem with where the field was written."""
    located = []
    for problem in problems:
        m = _PROBLEM.fullmatch(problem)
        if m is None or m.group("path") == "spec":
            text = m.group("text") if m else problem
            located.append(f"{_whole_spec_source(text, overrides, name)}: {text}")
            continue
        try:
            path = parse_path(m.group("path"))
        except ValueError:
            located.append(f"{name}: {problem}")
            continue
        text = m.group("text")
        path = _refine(path, text, data)
        source = next(
            (o for o in reversed(overrides) if path[: len(o.path)] == o.path),
            None,
        )
        if source is not None:
            located.append(f"--set {source.text}: {format_path(path)}: {text}")
            continue
        line = None
        for n in range(len(path), 0, -1):  # the field itself, else its nearest parent
            line = lines.get(path[:n])
            if line is not None:
                break
        where = f"{name}:{line}" if line is not None else name
        located.append(f"{where}: {format_path(path)}: {text}")
    return located


def _whole_spec_source(text: str, overrides: Sequence[Override], name: str) -> str:
    """Where a problem of the whole spec came from: the `--set`s of the fields it names (a
    rule between fields, e.g. the estimate and max_runtime), else the file."""
    named = [
        o
        for o in overrides
        if o.path and isinstance(o.path[0], str) and re.search(rf"\b{re.escape(o.path[0])}\b", text)
    ]
    if not named:
        return name
    return ", ".join(f"--set {o.text}" for o in named)


def name_overrides(problems: list[str], overrides: Sequence[str]) -> list[str]:
    """Problems found after the file was read (at submission: the deployment's allowed types,
    what its instances may read), each prefixed with the `--set` it came from, if any."""
    parsed = [parse_override(o) for o in overrides]
    named = []
    for problem in problems:
        m = _PROBLEM.fullmatch(problem)
        source = None
        if m is not None and m.group("path") != "spec":
            with contextlib.suppress(ValueError):
                path = parse_path(m.group("path"))
                source = next(
                    (f"--set {o.text}" for o in reversed(parsed) if path[: len(o.path)] == o.path),
                    None,
                )
        if source is None:
            text = m.group("text") if m is not None and m.group("path") == "spec" else problem
            source = _whole_spec_source(text, parsed, "")
        named.append(f"{source}: {problem}" if source else problem)
    return named


MAX_JOB_FILE_BYTES = 1024 * 1024
MAX_YAML_DEPTH = 32


def _check_depth(root: yaml.Node | None, name: str) -> None:
    """Refuse a document nested deeper than MAX_YAML_DEPTH (a loop, not recursion)."""
    stack: list[tuple[yaml.Node, int]] = [(root, 1)] if root is not None else []
    while stack:
        node, depth = stack.pop()
        if depth > MAX_YAML_DEPTH:
            raise JobFileError(
                [
                    f"{name}:{_mark_line(node)}: nested more than {MAX_YAML_DEPTH} levels deep; "
                    "flatten it (hyperparameters nest at most 20)"
                ]
            )
        if isinstance(node, yaml.SequenceNode):
            stack.extend((child, depth + 1) for child in node.value)
        elif isinstance(node, yaml.MappingNode):
            stack.extend((value, depth + 1) for _, value in node.value)


def load_job_file(
    path: str | Path,
    overrides: list[str] | None = None,
    *,
    now: datetime | None = None,
) -> JobFile:
    """Read, override and validate a job file; raises `JobFileError` with located problems."""
    file = Path(path)
    name = str(path)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise JobFileError([f"{name}: no such file"]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise JobFileError([f"{name}: cannot be read ({exc})"]) from None
    parsed_overrides = [parse_override(o) for o in overrides or []]

    if len(text) > MAX_JOB_FILE_BYTES:
        raise JobFileError(
            [f"{name}: {len(text):,} characters; a job file is at most {MAX_JOB_FILE_BYTES:,}"]
        )
    try:
        # Limits first, on the parser's events: nothing is composed or expanded before.
        check_yaml_events(text, what=name)
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        _check_depth(root, name)
        data = yaml.safe_load(text)
    except YamlLimitError as exc:
        raise JobFileError([str(exc)]) from None
    except RecursionError:
        raise JobFileError(
            [f"{name}: nested too deeply to read; a job file nests at most {MAX_YAML_DEPTH} levels"]
        ) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{name}:{mark.line + 1}:{mark.column + 1}" if mark else name
        raise JobFileError([f"{where}: not valid YAML: {_yaml_reason(exc)}"]) from None
    except yaml.YAMLError as exc:
        raise JobFileError([f"{name}: not valid YAML: {exc}"]) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        line = _mark_line(root) if root is not None else 1
        raise JobFileError(
            [
                f"{name}:{line}: the file must be a mapping of fields, e.g. 'name: digits' "
                "and 'entry_point: digits.train:DigitsSession' on lines of their own"
            ]
        )
    lines: dict[FieldPath, int] = {}
    problems: list[str] = []
    if root is not None:
        _map_lines(root, (), lines, problems, name)
    if problems:
        raise JobFileError(problems)

    for override in parsed_overrides:
        apply_override(data, override)
    source_dir = data.get("source_dir")
    if (
        isinstance(source_dir, str)
        and source_dir
        and not Path(source_dir).expanduser().is_absolute()
    ):
        from_set = any(o.path[:1] == ("source_dir",) for o in parsed_overrides)
        base = Path.cwd() if from_set else file.resolve().parent
        data["source_dir"] = str((base / Path(source_dir).expanduser()).resolve())
    elif isinstance(source_dir, str) and source_dir:
        data["source_dir"] = str(Path(source_dir).expanduser())

    spec = _checked(data, name, lines, parsed_overrides, now)
    return JobFile(path=file, spec=spec, data=data, lines=lines)


def load_notebook_job(
    path: str | Path,
    overrides: list[str] | None = None,
    *,
    now: datetime | None = None,
) -> JobFile:
    """`respot run train.ipynb`: a job that runs the notebook, its directory as source_dir.

    The name is the notebook's (made a valid job name); `--set` (and `-p name=value`, which
    the CLI turns into `--set hyperparameters.name=value`) override fields as for a job file.
    """
    file = Path(path)
    name = str(path)
    if not file.is_file():
        raise JobFileError([f"{name}: no such notebook"])
    parsed_overrides = [parse_override(o) for o in overrides or []]
    job_name = re.sub(r"[^A-Za-z0-9._-]+", "-", file.stem).strip("-._")[:64] or "notebook"
    data: dict[str, Any] = {
        "name": job_name,
        "entry_point": file.name,
        "source_dir": str(file.resolve().parent),
    }
    for override in parsed_overrides:
        apply_override(data, override)
    spec = _checked(data, name, {}, parsed_overrides, now)
    return JobFile(path=file, spec=spec, data=data, lines={})


def load_command_job(
    argv: list[str],
    overrides: list[str] | None = None,
    *,
    now: datetime | None = None,
) -> JobFile:
    """`respot run --command -- python train.py ...`: the current directory is source_dir
    and its name the job's (made a valid job name); `--set` overrides fields as for a file."""
    name = "--command"
    parsed_overrides = [parse_override(o) for o in overrides or []]
    here = Path.cwd()
    job_name = re.sub(r"[^A-Za-z0-9._-]+", "-", here.name).strip("-._")[:64] or "command"
    data: dict[str, Any] = {"name": job_name, "command": list(argv), "source_dir": str(here)}
    for override in parsed_overrides:
        apply_override(data, override)
    source_dir = data.get("source_dir")
    if isinstance(source_dir, str) and source_dir:
        data["source_dir"] = str((here / Path(source_dir).expanduser()).resolve())
    spec = _checked(data, name, {}, parsed_overrides, now)
    return JobFile(path=here, spec=spec, data=data, lines={})


def parameter_override(text: str) -> str:
    """`-p lr=0.01` as the `--set hyperparameters.lr=0.01` it stands for."""
    key, sep, value = text.partition("=")
    if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key.strip()):
        raise JobFileError([f"-p {text!r}: write name=value with a Python name, e.g. -p lr=0.01"])
    return f"hyperparameters.{key.strip()}={value}"


def _checked(
    data: dict[str, Any],
    name: str,
    lines: dict[FieldPath, int],
    overrides: list[Override],
    now: datetime | None,
) -> TrainingEnvVar:
    """The spec of a job file, a notebook or a command: validated, then the checks against
    the clock (`preflight`); any problem located at its line or its `--set`."""
    from respot.spec.preflight import preflight

    try:
        spec = validate_spec(data)
    except SpecError as exc:
        raise JobFileError(
            locate(exc.problems, name=name, data=data, lines=lines, overrides=overrides)
        ) from None
    late = preflight(spec, now or datetime.now(UTC))
    if late:
        raise JobFileError(locate(late, name=name, data=data, lines=lines, overrides=overrides))
    return spec
