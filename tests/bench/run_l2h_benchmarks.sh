#!/usr/bin/env bash
# Every L2H number in docs/benchmarks.md, in one session:
#   tests/bench/run_l2h_benchmarks.sh [BUILD_DIR] [WORK_DIR]
# 1. core algorithm, 50,000 x 100 (Google Benchmark, 1 and 2 threads)
# 2. the paper's appendix code on the same matrix (Debian numpy/scipy)
# 3. core algorithm at ImageNet-1k shape, 1,281,167 x 1,000
# 4. end to end through dendrod and the CLI at both shapes (upload, job, RSS)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${1:-$root/build}"
work="${2:-/tmp/dendro-bench}"
mkdir -p "$work"
echo "== machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)," \
     "load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%FT%TZ)"
echo "== 1. core L2H, 50,000 x 100"
"$build/tests/bench/l2h_bench" --write_npy="$work/l2h_50000x100.npy"
"$build/tests/bench/l2h_bench" --write_steps="$work/l2h_50000x100_steps.json"
"$build/tests/bench/l2h_bench" --benchmark_filter='BM_L2h/' --benchmark_repetitions=5 \
  --benchmark_report_aggregates_only=true
echo "== 2. appendix reference code, same matrix (5 runs), and step comparison"
/usr/bin/python3 "$root/tests/bench/l2h_reference.py" "$work/l2h_50000x100.npy" 5 \
  --compare "$work/l2h_50000x100_steps.json"
echo "== 3. core L2H, 1,281,167 x 1,000"
"$build/tests/bench/l2h_bench" --benchmark_filter='BM_L2hImageNetScale'
echo "== 4. end to end (dendrod + dendro CLI)"
bash "$root/tests/bench/l2h_e2e.sh" "$build" "$work" 50000 100
bash "$root/tests/bench/l2h_e2e.sh" "$build" "$work" 1281167 1000
