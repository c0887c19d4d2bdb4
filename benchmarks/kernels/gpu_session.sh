#!/bin/bash
# Kernel work on a GPU host (device tool), from the repository root after
# `bash .kit/run/setup-kit.sh` (vLLM 0.26 kit in /tmp/site). STEPS picks what runs, in order:
#   tests   kernel tests on the GPU          shapes  full shapes vs float64 and vLLM
#   sweep   tile-config sweep (decode sizes) bench   microbenchmark, ours vs vLLM (the table)
# Everything lands in $OUT (or /tmp/hml-out).
set -u
OUT=${OUT:-/tmp/hml-out}; mkdir -p "$OUT"; STEPS=${STEPS:-tests shapes bench}
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 VLLM_USE_FLASHINFER_SAMPLER=0 TRITON_INTERPRET=0
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/env.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$OUT/env.txt"
for step in $STEPS; do
  began=$(date +%s)
  case $step in
    tests)
      # (the whole GPU suite: 239 s on an H200, fifteenth window)
      echo "== pytest tests/kernels and the plugin's wrapper and fused GEMM (GPU)"
      timeout 480 python3 -m pytest -c /dev/null --rootdir . -q -p no:cacheprovider tests/kernels \
        tests/plugins/test_punica_wrapper.py tests/plugins/test_fused_gemm.py 2>&1 \
        | tee "$OUT/pytest_gpu.txt" | tail -15 ;;
    shapes)
      echo "== full shapes vs float64"
      timeout 200 python3 benchmarks/kernels/check_full_shapes.py 2>&1 | tee "$OUT/full_shapes.txt" | tail -30 ;;
    sweep)
      echo "== tile sweep"
      timeout ${SWEEP_TIMEOUT:-480} python3 benchmarks/kernels/bench_lora.py --out "$OUT" --sweep \
        ${SWEEP_ARGS:-} 2>&1 | grep -v -i warn | tee "$OUT/sweep.txt" ;;
    bench)
      echo "== microbenchmark"
      timeout ${BENCH_TIMEOUT:-330} python3 benchmarks/kernels/bench_lora.py --out "$OUT" ${BENCH_ARGS:-} \
        > "$OUT/bench_log.txt" 2>&1
      grep -i "empty" "$OUT/bench_log.txt"; tail -3 "$OUT/bench_log.txt"; cat "$OUT/bench_lora.md" 2>/dev/null ;;
    *) echo "unknown step $step"; exit 2 ;;
  esac
  echo "-- $step: $(( $(date +%s) - began )) s"
done
