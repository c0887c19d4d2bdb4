#!/bin/bash
# One GPU session (device tool): kernel tests on the GPU, full-shape checks, microbenchmark.
# Run from the repository root after `bash .kit/run/setup-kit.sh` (vLLM 0.26 kit in /tmp/site).
# Everything lands in $OUT (or /tmp/hml-out).
set -u
OUT=${OUT:-/tmp/hml-out}; mkdir -p "$OUT"
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 VLLM_USE_FLASHINFER_SAMPLER=0 TRITON_INTERPRET=0
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/env.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$OUT/env.txt"
echo "== pytest tests/kernels tests/plugins/test_punica_wrapper.py (GPU)"
timeout 240 python3 -m pytest -c /dev/null --rootdir . -q -p no:cacheprovider tests/kernels tests/plugins/test_punica_wrapper.py \
  2>&1 | tee "$OUT/pytest_gpu.txt" | tail -15
echo "== full shapes vs float64"
timeout 150 python3 benchmarks/kernels/check_full_shapes.py 2>&1 | tee "$OUT/full_shapes.txt" | tail -30
echo "== microbenchmark"
timeout ${BENCH_TIMEOUT:-300} python3 benchmarks/kernels/bench_lora.py --out "$OUT" ${BENCH_ARGS:-} \
  > "$OUT/bench_log.txt" 2>&1
tail -5 "$OUT/bench_log.txt"; cat "$OUT/bench_lora.md" 2>/dev/null
