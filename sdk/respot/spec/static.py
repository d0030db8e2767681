"""What `run --check` can tell from the job's source without importing it (`ast` only).

- `entry_point_problems`: the entry point's class is defined (or imported) at the top level
  of its module; a typo fails here, not on the instance after a boot.
- `checkpoint_warnings`: nothing in the job can checkpoint (a session that never calls
  `save_checkpoint`, a command whose code never names RESPOT_CHECKPOINT_DIR nor a respot
  integration): an interruption would restart it from zero. A warning, not an error: code
  can reach the directory in ways a reading cannot see.
The researcher's code is read, never run; what is read is bounded.
"""

from __future__ import annotations

import ast
from pathlib import Path

from respot.spec.training import TrainingEnvVar

MAX_FILES = 500
MAX_FILE_BYTES = 2_000_000
# Words in a command's code that mean it saves where respot looks (docs/commands.md).
CHECKPOINT_WORDS = ("RESPOT_CHECKPOINT_DIR", "checkpoint_saved", "respot.integrations")
NEVER_CHECKPOINTS = "an interruption restarts it from zero"


def _module_file(source_dir: Path, module: str) -> Path | None:
    parts = module.split(".")
    for candidate in (
        source_dir.joinpath(*parts).with_suffix(".py"),
        source_dir.joinpath(*parts, "__init__.py"),
    ):
        if candidate.is_file():
            return candidate
    return None


def _parse(path: Path) -> ast.Module | None:
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            return None
        return ast.parse(path.read_text(encoding="utf-8", errors="replace"), str(path))
    except (OSError, SyntaxError, ValueError):
        return None


def _top_level_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.ImportFrom | ast.Import):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def _session_class(spec: TrainingEnvVar) -> tuple[Path, ast.Module, str] | None:
    if spec.source_dir is None or spec.entry_point is None or ":" not in spec.entry_point:
        return None
    module, _, class_name = spec.entry_point.partition(":")
    path = _module_file(Path(spec.source_dir), module)
    tree = _parse(path) if path is not None else None
    if path is None or tree is None:
        return None
    return path, tree, class_name


def entry_point_problems(spec: TrainingEnvVar) -> list[str]:
    """The entry point's class is not defined at the top level of its module."""
    found = _session_class(spec)
    if found is None:
        return []  # no source_dir to read, a notebook, or a module preflight already flags
    path, tree, class_name = found
    names = _top_level_names(tree)
    if class_name in names or "*" in names or "__getattr__" in names or _mentions_globals(tree):
        return []  # defined, or defined in a way a reading cannot follow: no claim
    classes = sorted(n.name for n in tree.body if isinstance(n, ast.ClassDef))
    hint = f"; it defines {', '.join(classes)}" if classes else "; it defines no class"
    return [f"entry_point: {path.name} has no class {class_name!r}{hint} (fix the name after ':')"]


def _mentions(tree: ast.AST, words: tuple[str, ...]) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
        elif isinstance(node, ast.Attribute):
            text = node.attr
        elif isinstance(node, ast.Name):
            text = node.id
        elif isinstance(node, ast.ImportFrom):
            text = " ".join(f"{node.module}.{a.name}" for a in node.names)
        else:
            continue
        if any(w in text for w in words):
            return True
    return False


def _mentions_globals(tree: ast.AST) -> bool:
    """The module writes its namespace by hand (`globals()[...] = ...`, `setattr(module)`)."""
    return any(
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ("globals", "setattr", "exec")
        for node in ast.walk(tree)
    )


def command_problems(spec: TrainingEnvVar) -> list[str]:
    """`python script.py` whose script is not in source_dir."""
    if spec.command is None or spec.source_dir is None or len(spec.command) < 2:
        return []
    program, script = spec.command[0], spec.command[1]
    if program not in ("python", "python3", "torchrun") or not script.endswith(".py"):
        return []
    if Path(spec.source_dir, script).is_file():
        return []
    return [
        f"command: {script!r} is not in source_dir {spec.source_dir!r}; the command runs "
        "there (check the name, or set source_dir)"
    ]


def checkpoint_warnings(spec: TrainingEnvVar) -> list[str]:
    """Nothing in the job can checkpoint, as far as a reading of its source tells."""
    if spec.source_dir is None or not Path(spec.source_dir).is_dir():
        return []
    if spec.entry_point is not None and spec.entry_point.endswith(".ipynb"):
        return []  # a notebook's cells are not read here
    files = sorted(Path(spec.source_dir).rglob("*.py"))[:MAX_FILES]
    trees = [t for t in (_parse(p) for p in files) if t is not None]
    words = CHECKPOINT_WORDS if spec.command is not None else ("save_checkpoint",)
    if not trees or any(_mentions(t, words) for t in trees):
        return []  # nothing to read (a shell script, a binary): no claim either way
    if spec.command is not None:
        return [
            "command: no Python file in source_dir names RESPOT_CHECKPOINT_DIR or "
            f"respot.checkpoint_saved: {NEVER_CHECKPOINTS} (docs/commands.md)"
        ]
    return [f"entry_point: no Python file in source_dir calls save_checkpoint: {NEVER_CHECKPOINTS}"]
