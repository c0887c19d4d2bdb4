#!/bin/bash
# Does LoRA inside the base GEMM serve the right outputs inside vLLM? On the GPU host (after
# setup-kit.sh), three servers of the random Llama-3-8B-shaped model with two rank-16 adapters,
# all with --specialize-active-lora: float64 LoRA (the reference), ours with the fused GEMM on,
# ours with it off. Each gets greedy_probe.py --copies $COPIES (every greedy request $COPIES times
# at once: decode batches of $COPIES rows of one adapter, the steps the fused GEMM serves, 33-64
# rows; a lone request decodes one row and never reaches it), and both of ours are compared with
# the reference. No warm-up and no throughput runs: the lean form of gpu_e2e.sh's probes.
#   COPIES=48  OUT=/tmp/hml-probe-batch  MODEL=/tmp/m8b (made when missing)
#   HI_MOE_LORA_GEMM_TILES=...  a tile table other than the shipped one (tune_gemm_tiles.py)
set -u
COPIES=${COPIES:-48}; OUT=${OUT:-/tmp/hml-probe-batch}; MODEL=${MODEL:-/tmp/m8b}
mkdir -p "$OUT"
export PYTHONPATH=/tmp/site VLLM_USE_FLASHINFER_SAMPLER=0 HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-4}
[ -f "$MODEL/config.json" ] || python3 .kit/run/make-random-llama.py "$MODEL" 2 16 > /dev/null 2>&1
[ -f "$MODEL-adapters/a1/adapter_config.json" ] \
  || python3 benchmarks/kernels/make_lora_adapters.py "$MODEL" "$MODEL-adapters" 2 | tail -1
declare -A PORT=([reference]=8400 [fused]=8401 [unfused]=8402) INNER=([reference]=21000 [fused]=22000 [unfused]=23000) PID
began=$(date +%s)
for L in reference fused unfused; do
  KERNELS=ours; FUSED=off
  [ $L = reference ] && KERNELS=reference; [ $L = fused ] && FUSED=on
  env VLLM_PLUGINS=hi_moe_lora_kernels HI_MOE_LORA_KERNELS=$KERNELS HI_MOE_LORA_FUSED_GEMM=$FUSED \
    VLLM_CACHE_ROOT=/tmp/vllm-cache-probe-$L VLLM_PORT=${INNER[$L]} \
    python3 -m vllm.entrypoints.cli.main serve "$MODEL" --served-model-name base --enable-lora \
    --max-loras 4 --max-lora-rank 16 --lora-modules a0="$MODEL-adapters/a0" a1="$MODEL-adapters/a1" \
    --port ${PORT[$L]} --max-model-len 2048 --no-enable-prefix-caching --specialize-active-lora \
    --gpu-memory-utilization 0.29 --kv-cache-memory-bytes 4294967296 \
    --cudagraph-capture-sizes 1 2 4 8 16 24 32 40 48 56 64 > "$OUT/$L-serve.log" 2>&1 &
  PID[$L]=$!
done
for L in reference fused unfused; do
  until curl -s "localhost:${PORT[$L]}/v1/models" > /dev/null; do
    kill -0 ${PID[$L]} 2>/dev/null || { echo "$L: server died"; tail -30 "$OUT/$L-serve.log"; exit 1; }
    sleep 2
  done
  echo "$L: up after $(( $(date +%s) - began )) s"
done
for L in reference fused unfused; do
  python3 benchmarks/kernels/greedy_probe.py --port ${PORT[$L]} --models base,a0,a1 \
    --copies "$COPIES" --out "$OUT/$L-batch.json" > /dev/null || echo "$L: probe failed"
done
for L in fused unfused; do
  echo "ours, fused GEMM $L, $COPIES copies, against float64 LoRA:"
  python3 benchmarks/kernels/greedy_probe.py --compare "$OUT/reference-batch.json" "$OUT/$L-batch.json"
done
echo "fused against unfused:"
python3 benchmarks/kernels/greedy_probe.py --compare "$OUT/unfused-batch.json" "$OUT/fused-batch.json"
grep -h "LoRA in the base GEMM" "$OUT"/*-serve.log | head -3
kill ${PID[@]} 2>/dev/null; wait 2>/dev/null
echo "done after $(( $(date +%s) - began )) s"
