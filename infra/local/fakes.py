"""Stand-ins for what the AMI provides and this machine lacks: systemd, shutdown, nvidia-smi, a
container engine. A standalone script (no respot imports): the sandbox's `/usr/bin/systemctl`
etc. are two-line wrappers that run `python fakes.py <name> <args...>`.

Every fake works inside one instance's sandbox, `$RESPOT_ROOT` (infra/local/sandbox.py):
- `systemctl enable --now X` starts unit X as systemd would: `EnvironmentFile=`,
  `Environment=`, `WorkingDirectory=`, `ExecStart=` (output to the unit's journal file), and
  `ExecStopPost=` once it ends. An absolute path in the unit means the same path under the root
  when it exists there (as if the sandbox were the machine's `/`).
- `systemctl poweroff` and `shutdown -h now` write `$RESPOT_ROOT/run/poweroff`; the local fleet
  sees it and shuts the instance down (the launch template says shutdown terminates).
- `nvidia-smi --query-gpu=index --format=csv,noheader` lists `$RESPOT_FAKE_GPUS` GPUs.
- `docker pull|run|rm`: records each argv (one JSON line in `$RESPOT_ROOT/var/log/docker.jsonl`)
  and, for `run`, runs the container's command directly on this machine with the `-e` variables
  and the `-w` directory (mounts are same-path, so the paths agree); the image's `python` is
  `$RESPOT_FAKE_IMAGE_PYTHON`.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(os.environ.get("RESPOT_ROOT") or "/")


def rooted(path: str) -> str:
    """`path` under the sandbox's root if it exists there, else as given."""
    if path.startswith("/"):
        candidate = ROOT / path.lstrip("/")
        if candidate.exists():
            return str(candidate)
    return path


def poweroff(why: str) -> int:
    marker = ROOT / "run" / "poweroff"
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(f"{why} at {time.time():.3f}\n")
    return 0


def read_unit(path: Path) -> dict[str, list[str]]:
    unit: dict[str, list[str]] = {}
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", "[")) or "=" not in line:
            continue
        key, _, value = line.partition("=")
        unit.setdefault(key.strip(), []).append(value.strip())
    return unit


def env_file(path: str) -> dict[str, str]:
    values: dict[str, str] = {}
    for raw in Path(rooted(path)).read_text().splitlines():
        if raw.strip() and not raw.startswith("#") and "=" in raw:
            key, _, value = raw.partition("=")
            values[key.strip()] = value
    return values


def run_unit(unit_path: str) -> int:
    """The supervisor of one started unit (what systemd does for a Type=simple service)."""
    unit = read_unit(Path(unit_path))
    env = dict(os.environ)
    for path in unit.get("EnvironmentFile", []):
        env.update(env_file(path))
    for assignment in unit.get("Environment", []):
        key, _, value = assignment.partition("=")
        env[key] = value
    cwd = rooted(unit.get("WorkingDirectory", ["/"])[0])
    journal = ROOT / "var" / "log" / "journal" / f"{Path(unit_path).stem}.log"
    journal.parent.mkdir(parents=True, exist_ok=True)
    argv = shlex.split(unit["ExecStart"][0])
    with journal.open("ab") as out:
        code = subprocess.call(  # noqa: S603 - the unit's own argv
            [rooted(argv[0]), *argv[1:]], env=env, cwd=cwd, stdout=out, stderr=out
        )
        out.write(f"fake-systemd: {argv[0]} exited {code}\n".encode())
    for post in unit.get("ExecStopPost", []):
        words = shlex.split(post)
        subprocess.call([rooted(words[0]), *words[1:]], env=env)  # noqa: S603
    return 0


def systemctl(args: list[str]) -> int:
    words = [a for a in args if not a.startswith("--")]
    if not words:
        return 0
    if words[0] in ("poweroff", "halt", "reboot"):
        return poweroff(f"systemctl {words[0]}")
    if words[0] == "daemon-reload":
        return 0
    if words[0] in ("enable", "start") and ("--now" in args or words[0] == "start"):
        for name in words[1:]:
            unit = ROOT / "etc" / "systemd" / "system" / name
            if not unit.is_file():
                print(f"Failed to start {name}: Unit {name} not found.", file=sys.stderr)
                return 5
            subprocess.Popen(  # noqa: S603 - this script, by its own path
                [sys.executable, __file__, "run-unit", str(unit)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        return 0
    return 0


def nvidia_smi(args: list[str]) -> int:
    count = int(os.environ.get("RESPOT_FAKE_GPUS", "1"))
    for i in range(count):
        if "-L" in args:
            print(f"GPU {i}: NVIDIA A10G (UUID: GPU-fake-{i})")
        else:
            print(i)
    return 0


def docker(args: list[str]) -> int:
    log = ROOT / "var" / "log" / "docker.jsonl"
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a") as f:
        f.write(json.dumps(args) + "\n")
    if not args or args[0] != "run":
        return 0
    env = {k: v for k, v in os.environ.items() if not k.startswith("RESPOT_FAKE_")}
    container_env: dict[str, str] = {"PATH": env.get("PATH", "/usr/bin:/bin")}
    cwd = "/"
    i = 1
    with_value = {
        "--gpus",
        "--network",
        "--name",
        "-v",
        "--volume",
        "-e",
        "--env",
        "-w",
        "--workdir",
        "--ipc",
        "--shm-size",
        "--user",
        "--entrypoint",
    }
    while i < len(args) and args[i].startswith("-"):
        flag = args[i]
        value = args[i + 1] if flag in with_value and i + 1 < len(args) else None
        if flag in ("-e", "--env") and value is not None:
            name, eq, given = value.partition("=")
            container_env[name] = given if eq else os.environ.get(name, "")
        if flag in ("-w", "--workdir") and value is not None:
            cwd = value
        i += 2 if value is not None else 1
    command = args[i + 1 :]  # after the image
    if command and command[0] == "python":
        command[0] = os.environ["RESPOT_FAKE_IMAGE_PYTHON"]
    return subprocess.call(command, env=container_env, cwd=cwd)  # noqa: S603


def main() -> int:
    name, args = sys.argv[1], sys.argv[2:]
    if name == "systemctl":
        return systemctl(args)
    if name == "run-unit":
        return run_unit(args[0])
    if name == "shutdown":
        return poweroff("shutdown " + " ".join(args))
    if name == "nvidia-smi":
        return nvidia_smi(args)
    if name == "docker":
        return docker(args)
    print(f"fakes.py: no fake named {name}", file=sys.stderr)
    return 127


if __name__ == "__main__":
    sys.exit(main())
