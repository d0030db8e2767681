"""The argv the agent starts for a command job: the job's own command, on the job's Python.

- `python ...` / `python3 ...`: the job's Python (the framework's, the `requirements:`
  environment's, or the image's `python`);
- `torchrun ...`: `<job python> -m torch.distributed.run ...`, with `--standalone --nnodes=1
  --nproc-per-node=<processes_per_node>` added when the command gives no process count;
- `accelerate launch ...`: `<job python> -m accelerate.commands.launch ...`, with
  `--num_processes <processes_per_node>` added when the command gives none;
- `python script.py ...` with `processes_per_node` above 1: under torchrun as above;
- anything else (`bash run.sh`, `./train`): as it is, with the job's Python first on PATH.
"""

from __future__ import annotations

PYTHONS = ("python", "python3")
TORCHRUN_COUNTS = ("--nproc-per-node", "--nproc_per_node")
ACCELERATE_COUNTS = ("--num_processes", "--num-processes")


def _gives(args: list[str], options: tuple[str, ...]) -> bool:
    return any(a == o or a.startswith(o + "=") for a in args for o in options)


def torchrun_argv(python: str, nproc: int, args: list[str]) -> list[str]:
    """`torchrun args` on the job's Python, one node, `nproc` processes unless args say."""
    head = [python, "-m", "torch.distributed.run"]
    if _gives(args, TORCHRUN_COUNTS):
        return [*head, *args]
    return [*head, "--standalone", "--nnodes=1", f"--nproc-per-node={nproc}", *args]


def command_argv(command: list[str], *, python: str, nproc: int) -> list[str]:
    """The argv to start (never a shell string)."""
    program, args = command[0], list(command[1:])
    if program == "torchrun":
        return torchrun_argv(python, nproc, args)
    if program == "accelerate" and args[:1] == ["launch"]:
        rest = args[1:]
        head = [python, "-m", "accelerate.commands.launch"]
        if nproc > 1 and not _gives(rest, ACCELERATE_COUNTS):
            head += ["--num_processes", str(nproc)]
        return [*head, *rest]
    if program in PYTHONS:
        if nproc > 1 and args and not args[0].startswith("-"):
            return torchrun_argv(python, nproc, args)  # torchrun runs `python <script>`
        if nproc > 1 and args[:1] == ["-m"] and len(args) > 1:
            return torchrun_argv(python, nproc, args)
        return [python, *args]
    return [program, *args]
