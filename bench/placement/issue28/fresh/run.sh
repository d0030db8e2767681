#!/bin/bash
# Fresh synthetic markets for issue 28, generated after the policy was fixed (seeds 301-312,
# never used to design anything): 2-22 pools, G = 120 or 300 s, 8 windows a cell.
# From the project root: bash bench/placement/issue28/fresh/run.sh  (about 2 min on one core of this machine)
set -euo pipefail
out=bench/placement/issue28/fresh
for i in $(seq 301 312); do
  pools=$(( (i % 6) * 4 + 2 ))
  gap=$(( i % 2 == 0 ? 300 : 120 ))
  python bench/placement/synth.py --seed "$i" --pools "$pools" --gap "$gap" --out "/tmp/fresh/s$i" > /dev/null
  respot bench placement --traces "/tmp/fresh/s$i" --work-hours 48 --deadline-hours 52 70 \
      --changeover-hours 0.05 0.2 --windows 8 --workers 1 --json > "$out/results-fresh-$i.jsonl"
done
python bench/placement/report.py "$out"/results-fresh-*.jsonl
