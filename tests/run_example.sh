#!/usr/bin/env bash
# Runs one example as a user would, on whatever machine this is (no GPU here in CI):
# its own trace, then the same binary traced at exit through CUPROF_TRACE, and
# checks both traces against the contract with tests/validate_trace.py.
#   tests/run_example.sh <example binary> <scratch dir>
set -euo pipefail
example=$1
scratch=$2
here=$(cd "$(dirname "$0")" && pwd)
name=$(basename "$example")
rm -rf "$scratch" && mkdir -p "$scratch"

"$example" --trace "$scratch/$name.json" >"$scratch/$name.out" 2>&1 || { cat "$scratch/$name.out"; exit 1; }
grep -q "Self CPU time total" "$scratch/$name.out" || { echo "no table printed"; cat "$scratch/$name.out"; exit 1; }

CUPROF_TRACE="$scratch/at_exit.json" "$example" --trace "$scratch/ignored.json" >"$scratch/at_exit.out" 2>&1 ||
  { cat "$scratch/at_exit.out"; exit 1; }
grep -q "cuprof: trace written to $scratch/at_exit.json" "$scratch/at_exit.out" ||
  { echo "no 'trace written' line"; cat "$scratch/at_exit.out"; exit 1; }

python3 "$here/validate_trace.py" "$scratch/$name.json" "$scratch/at_exit.json"
