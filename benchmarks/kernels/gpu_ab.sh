#!/bin/bash
# Side-by-side timing of kernel source trees on the GPU host (after setup-kit.sh), with
# benchmarks/kernels/ab_kernels.py: compiles in parallel, then interleaved timing rounds.
#   TREES="new=. old=.ab/old"   NAME=PATH pairs; each PATH holds a hi_moe_lora package (a tree
#                               made with `git archive REV hi_moe_lora | tar -x -C PATH` under an
#                               ignored directory travels to the device with the run's carry)
#   CASES="qkv:1:16/64:1,..."   shape:M:rank[/max_rank]:adapters, as bench_lora.py --sweep-cases
#   ROUNDS=2                    timing rounds (the order of the trees alternates)
# Results: $OUT/ab.txt (table) and $OUT/ab.json; the Triton caches stay in /tmp/ab-cache, so a
# second call with the same trees and cases times without compiling.
set -u
OUT=${OUT:-/tmp/hml-out}; mkdir -p "$OUT"
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 TRITON_INTERPRET=0
: "${TREES:?TREES=\"name=path ...\"}" "${CASES:?CASES=\"shape:M:rank/max:adapters,...\"}"
args=()
for tree in $TREES; do args+=(--tree "$tree"); done
python3 benchmarks/kernels/ab_kernels.py --cache /tmp/ab-cache "${args[@]}" --cases "$CASES" \
  --rounds "${ROUNDS:-2}" --out "$OUT/ab.json" 2>&1 | tee "$OUT/ab.txt" | tail -40
