"""The public face of `respot` and the map of its rooms (docs/architecture.md).

GIVEN the package researchers import, WHEN its public names are used in a fresh interpreter
(the way a notebook or a script meets them), THEN each resolves to what the docs promise;
and every room of `sdk/respot` is on the map, with nothing loose at the top.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import respot

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "sdk" / "respot"
# The public face: what may sit at sdk/respot's top level besides the rooms.
TOP_LEVEL_FILES = {"__init__.py", "exceptions.py", "py.typed"}
DATA_DIRS = {"data"}


def _fresh(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_every_public_name_resolves_in_a_fresh_interpreter() -> None:
    # GIVEN a fresh interpreter WHEN every name of __all__ is imported THEN none is missing
    out = _fresh(
        "import respot\n"
        "missing = [n for n in respot.__all__ if getattr(respot, n, None) is None]\n"
        "print(missing)\n"
    )
    assert out == "[]"


def test_respot_session_stays_the_function_after_training_session_is_imported() -> None:
    # A notebook that imports TrainingSession (or anything that loads its module) and then
    # calls respot.session(): the module that defines the class must not shadow the function.
    out = _fresh(
        "from respot import TrainingSession\n"
        "import respot.training.session, respot.training.notebook\n"
        "import respot\n"
        "from respot import session\n"
        "print(callable(respot.session), respot.session is session,"
        " type(respot.session).__name__)\n"
    )
    assert out == "True True function"


def test_the_documented_imports_work() -> None:
    from respot import TrainingEnvVar, TrainingSession, run, session

    assert callable(run) and callable(session)
    assert TrainingSession.__module__ == "respot.training.session"
    assert TrainingEnvVar.__module__ == "respot.spec.training"


def test_nothing_loose_at_the_top_of_the_package() -> None:
    loose = sorted(
        p.name
        for p in PACKAGE.iterdir()
        if p.is_file() and p.name not in TOP_LEVEL_FILES and not p.name.endswith(".pyc")
    )
    assert loose == [], f"modules at sdk/respot's top level: {loose}; give them a room"


def test_every_room_is_on_the_map() -> None:
    rooms = {
        p.name
        for p in PACKAGE.iterdir()
        if p.is_dir() and (p / "__init__.py").is_file() and p.name not in DATA_DIRS
    }
    architecture = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    unmapped = sorted(room for room in rooms if f"`{room}`" not in architecture)
    assert unmapped == [], f"rooms missing from docs/architecture.md: {unmapped}"
    assert len(rooms) >= 15, rooms  # the rooms exist at all (a renamed PACKAGE would pass)
    assert respot.__file__ is not None
    assert Path(respot.__file__).resolve().parent == PACKAGE.resolve()
