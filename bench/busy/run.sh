#!/usr/bin/env bash
# `make test` on a fresh clone, N times, while two busy loops keep both cores at 100%
# (issue: the suite must pass on a researcher's laptop that is never idle).
#
#   bash bench/busy/run.sh [RUNS] [LOOPS]      # defaults: 5 runs, 2 busy loops
#   LOOPS=0 gives the idle figure.
#
# One `git clone` of this checkout's HEAD into an empty temporary folder (as .ci/run does)
# and one `make setup` there with the machine otherwise idle (installing packages is not
# what is measured). Then, per run: `git clean -xfd` of everything but .venv (so no cache of
# an earlier run helps: pytest's, mypy's, ruff's, cdk.out), LOOPS `python3 -c 'while True:
# pass'` processes, and `make test`, timed.
# One line per run goes to bench/busy/results.tsv (date, commit, loops, result, seconds, the
# pytest summary line, load average at the end) and the whole log to bench/out/busy-N.log.
set -uo pipefail
runs="${1:-5}"
loops="${2:-2}"
src="$(git -C "$(dirname "$0")" rev-parse --show-toplevel)"
out="$src/bench/out"
results="$src/bench/busy/results.tsv"
mkdir -p "$out"
[ -f "$results" ] || printf 'date\tcommit\tcores\tloops\tresult\tmake_test_seconds\tpytest\tload_at_end\n' >"$results"
commit="$(git -C "$src" rev-parse --short HEAD)"
passed=0
untrap='import os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_DFL)
signal.signal(signal.SIGQUIT, signal.SIG_DFL)
os.execvp(sys.argv[1], sys.argv[1:])'
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
git clone --quiet --no-hardlinks "$src" "$tmp/respot"
(cd "$tmp/respot" && make setup) >"$out/busy-$commit-setup.log" 2>&1 \
    || { echo "make setup failed (see $out/busy-$commit-setup.log)"; exit 2; }
for i in $(seq 1 "$runs"); do
    log="$out/busy-$commit-$loops-$i.log"
    git -C "$tmp/respot" clean -xfdq -e .venv -e '*.egg-info'
    pids=()
    for _ in $(seq 1 "$loops"); do
        python3 -c 'while True: pass' &
        pids+=("$!")
    done
    start=$(date +%s)
    # `make test` gets SIGINT and SIGQUIT at their defaults, as from a terminal: a script
    # started with `&` by a shell without job control has them ignored (bash(1), "Signals"),
    # and every process of the suite would inherit that.
    (cd "$tmp/respot" && python3 -c "$untrap" make test) >>"$log" 2>&1
    rc=$?
    seconds=$(( $(date +%s) - start ))
    load="$(cut -d' ' -f1-3 /proc/loadavg)"
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null; done
    wait "${pids[@]}" 2>/dev/null
    summary="$(grep -E '^(=+ )?[0-9]+ (passed|failed)' "$log" | tail -n 1 | tr -d '=' | sed 's/^ *//;s/ *$//')"
    result=$([ "$rc" -eq 0 ] && echo pass || echo FAIL)
    [ "$rc" -eq 0 ] && passed=$((passed + 1))
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$(date -u +%FT%TZ)" "$commit" "$(nproc)" "$loops" \
        "$result" "$seconds" "$summary" "$load" >>"$results"
    echo "run $i/$runs: $result in ${seconds}s ($summary; load $load)"
done
echo "$passed of $runs passed with $loops busy loop(s)"
[ "$passed" -eq "$runs" ]
