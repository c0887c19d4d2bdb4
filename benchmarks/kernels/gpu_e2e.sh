#!/bin/bash
# End to end on the GPU host (after setup-kit.sh): vLLM 0.26 serving a random Llama-3-8B-shaped
# model with 16 rank-16 adapters; LABEL=ours (our kernels) or LABEL=native (vLLM's, through the
# plugin's HI_MOE_LORA_KERNELS=vllm switch). Greedy probe twice (run-to-run reference), then
# `vllm bench serve` base / one adapter / 16 adapters. Results under $OUT.
set -u
LABEL=${LABEL:-ours}; OUT=${OUT:-/tmp/hml-out}; PORT=${PORT:-8000}; MODEL=/tmp/m8b; N=16; R=${R:-16}
mkdir -p "$OUT"
export PYTHONPATH=/tmp/site VLLM_USE_FLASHINFER_SAMPLER=0 HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
[ -f /tmp/site/plugins/punica.py ] || python3 -m pip install -q --no-deps --no-build-isolation \
  --no-index --target /tmp/site . 2>&1 | tail -2
[ -d $MODEL-adapters ] || python3 .kit/run/make-random-llama.py $MODEL $N 16 > /dev/null 2>&1
KERNELS=ours; [ "$LABEL" = native ] && KERNELS=vllm
MODS=$(for i in $(seq 0 $((N-1))); do echo -n "a$i=$MODEL-adapters/a$i "; done)
env VLLM_PLUGINS=hi_moe_lora_kernels HI_MOE_LORA_KERNELS=$KERNELS python3 -m vllm.entrypoints.cli.main \
  serve $MODEL --served-model-name base --enable-lora --max-loras $N --max-cpu-loras $((2*N)) \
  --max-lora-rank $R --lora-modules $MODS --port $PORT --max-model-len 2048 \
  --gpu-memory-utilization 0.85 ${EXTRA_ARGS:-} > "$OUT/$LABEL-serve.log" 2>&1 &
SP=$!
for i in $(seq 1 200); do
  sleep 3; curl -s "localhost:$PORT/v1/models" >/dev/null && break
  kill -0 $SP 2>/dev/null || { echo "server died"; tail -40 "$OUT/$LABEL-serve.log"; exit 1; }
done
echo "$LABEL: server up after $((i*3)) s"; grep -m3 -i "hi-moe-lora\|Using .*Punica" "$OUT/$LABEL-serve.log"
python3 benchmarks/kernels/greedy_probe.py --port $PORT --out "$OUT/$LABEL-probe1.json" > /dev/null
python3 benchmarks/kernels/greedy_probe.py --port $PORT --out "$OUT/$LABEL-probe2.json" > /dev/null
python3 benchmarks/kernels/greedy_probe.py --compare "$OUT/$LABEL-probe1.json" "$OUT/$LABEL-probe2.json"
B="python3 -m vllm.entrypoints.cli.main bench serve --backend openai --base-url http://localhost:$PORT \
 --endpoint /v1/completions --model base --tokenizer $MODEL --dataset-name random --random-input-len 256 \
 --random-output-len 128 --num-prompts 256 --max-concurrency ${C:-64} --ignore-eos --save-result --result-dir $OUT"
# Warm-up (first-use kernel compilation of both implementations stays out of the figures).
$B --lora-modules $(for i in $(seq 0 $((N-1))); do echo -n "a$i "; done) --num-prompts 96 \
  --result-filename "$LABEL-warmup.json" > /dev/null 2>&1
$B --result-filename "$LABEL-base.json" > /dev/null 2>&1
$B --lora-modules a0 --result-filename "$LABEL-one.json" > /dev/null 2>&1
$B --lora-modules $(for i in $(seq 0 $((N-1))); do echo -n "a$i "; done) --result-filename "$LABEL-many.json" > /dev/null 2>&1
kill $SP; wait $SP 2>/dev/null
python3 - "$OUT" "$LABEL" <<'PY'
import json, sys
res, label = sys.argv[1], sys.argv[2]
base = json.load(open(f"{res}/{label}-base.json"))["output_throughput"]
for k in ("base", "one", "many"):
    d = json.load(open(f"{res}/{label}-{k}.json"))
    print(f"{label:>7} {k:>5}: {d['output_throughput']:8.1f} out tok/s ({d['output_throughput']/base:.2f}x base)"
          f"  median TPOT {d['median_tpot_ms']:.2f} ms  done {d['completed']}")
PY
