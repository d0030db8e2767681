"""A job's `requirements:`: checked the same way on the laptop (at submit) and on the instance.

Each line is one PEP 508 requirement by name: `name`, `name[extra]`, version specifiers and
an environment marker. Nothing else reaches pip: no options (`-r`, `-e`, `--index-url`, ...),
no URLs and no local paths. Which index pip uses is the deployment's choice (pip's own
configuration on the instance), never the job's.
"""

from __future__ import annotations

import hashlib
import re

MAX_REQUIREMENTS = 200
_NAME = r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?"
_VERSION = r"[A-Za-z0-9.*+!_-]+"
_OP = r"(?:===|==|~=|!=|<=|>=|<|>)"
_SPEC = rf"{_OP}\s*{_VERSION}"
_MARKER = r"[A-Za-z0-9_.'\"<>=!~ ()-]+"
_REQUIREMENT = re.compile(
    rf"^(?P<name>{_NAME})\s*(?:\[\s*{_NAME}(?:\s*,\s*{_NAME})*\s*\])?\s*"
    rf"(?:\(?\s*{_SPEC}(?:\s*,\s*{_SPEC})*\s*\)?)?\s*(?:;\s*{_MARKER})?$"
)


class RequirementsError(ValueError):
    """A requirement line is not one respot passes to pip."""


def check_requirement(line: str) -> str:
    """The line, stripped, if it is a plain requirement; else RequirementsError saying why.

    One requirement is one line of printable ASCII: a line break (or any other control or
    non-ASCII character) would let the text after it reach pip as a line of its own, an
    option such as `--index-url` included.
    """
    if not isinstance(line, str):
        raise RequirementsError(f"{line!r} is not text; write a requirement such as 'six'")
    bad = next((ch for ch in line if not " " <= ch <= "~"), None)
    if bad is not None:
        shown = line if len(line) <= 80 else line[:80] + "..."
        raise RequirementsError(
            f"{shown!r} contains {bad!r} (a line break, control or non-ASCII character): one "
            "requirement per line and per list item, e.g. 'einops==0.8.0'"
        )
    text = line.strip()
    if text.startswith("-"):
        raise RequirementsError(
            f"{text!r}: pip options are not accepted in requirements (the deployment chooses "
            "the package index); list packages only, e.g. 'einops==0.8.0'"
        )
    if "://" in text or "@" in text or text.startswith((".", "/", "~")):
        raise RequirementsError(
            f"{text!r}: URLs and paths are not accepted; name a package from the index, "
            "e.g. 'einops==0.8.0', or build an image"
        )
    if not _REQUIREMENT.match(text):
        raise RequirementsError(
            f"{text!r} is not a requirement; write 'name', 'name==1.2' or "
            "'name[extra]>=1.2; python_version >= \"3.11\"'"
        )
    return text


def parse_requirements(text: str) -> list[str]:
    """The requirements of a requirements file: blank lines and `#` comments are skipped."""
    found: list[str] = []
    # Lines as pip would split them (str.splitlines: form feeds and Unicode separators too);
    # each is then checked whole, so none can start an option.
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        try:
            found.append(check_requirement(line))
        except RequirementsError as exc:
            raise RequirementsError(f"line {number}: {exc}") from None
    if len(found) > MAX_REQUIREMENTS:
        raise RequirementsError(f"{len(found)} requirements; at most {MAX_REQUIREMENTS}")
    return found


def requirements_hash(requirements: list[str], *platform: str) -> str:
    """The wheelhouse key: the sorted requirements and the platform (Python, machine, AMI)."""
    canonical = sorted({re.sub(r"\s+", "", r).lower() for r in requirements})
    return hashlib.sha256("\n".join([*canonical, "--", *platform]).encode()).hexdigest()


__all__ = ["RequirementsError", "check_requirement", "parse_requirements", "requirements_hash"]
