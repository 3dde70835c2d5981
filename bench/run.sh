#!/usr/bin/env bash
# bench/run.sh: runs every bench/bench_*.sh in turn (make bench). Each prints
# what it measured in this run, with ratios against bounds measured in the
# same run; none asserts a target.
set -u
cd "$(dirname "$0")/.."
rc=0
for b in bench/bench_*.sh; do
    [ -e "$b" ] || continue
    echo "=== $b"
    bash "$b" || { echo "bench: $b failed" >&2; rc=1; }
done
# issue 24: the admission policies at scale, on a simulated device
echo "=== bench/bench_admit.sh MODE=sim"
MODE=sim bash bench/bench_admit.sh || { echo "bench: bench_admit.sh MODE=sim failed" >&2; rc=1; }
exit $rc
