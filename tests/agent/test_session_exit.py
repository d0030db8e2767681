"""How the session process ends (`respot.agent.session_main.end_process`): everything Python's
own exit does for the researcher's code (non-daemon threads, executors, atexit, buffered
output, the exit status), but not the interpreter teardown, where a torch.distributed gloo
worker that outlives train() aborts the process (docs/agent.md, "How a session process ends")."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from .conftest import child_env

CHILD = textwrap.dedent(
    """
    import atexit, concurrent.futures, sys, threading, time
    from respot.agent.session_main import end_process

    def slow(name):
        time.sleep(0.3)
        print(name, "finished", flush=True)

    threading.Thread(target=slow, args=("thread",)).start()  # non-daemon: waited for
    concurrent.futures.ThreadPoolExecutor(1).submit(slow, "executor")  # never shut down
    atexit.register(print, "atexit ran")

    class Teardown:
        def __del__(self):
            print("torn down", flush=True)

    kept = Teardown()  # a module global: only the interpreter teardown would finalize it
    sys.stdout.write("buffered, never flushed by the code")
    end_process(int(sys.argv[1]))
    print("not reached")
    """
)


def run_child(code: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", CHILD, str(code)],
        env=child_env(),  # no PYTHONUNBUFFERED: stdout to a pipe is block-buffered
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_session_process_ends_as_python_would_but_without_the_interpreter_teardown() -> None:
    # GIVEN a session process with a running thread, an executor's pending work, an atexit
    # handler, buffered output and an object only the teardown would finalize
    # WHEN it ends through end_process with the status its session earned
    result = run_child(3)
    # THEN the status is kept, threads and executors finished, atexit ran, output is flushed
    assert result.returncode == 3, result.stderr
    out = result.stdout
    assert "thread finished" in out and "executor finished" in out, out
    assert "atexit ran" in out and "buffered, never flushed by the code" in out, out
    assert "not reached" not in out
    # AND the interpreter was not torn down (where a gloo worker thread that still drops a
    # Python reference is killed by pthread_exit and std::terminate aborts the rank)
    assert "torn down" not in out, out
    assert run_child(0).returncode == 0
