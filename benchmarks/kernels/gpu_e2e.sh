#!/bin/bash
# End to end on the GPU host (after setup-kit.sh): vLLM 0.26 serving a random Llama-3-8B-shaped
# model with 16 random rank-16 adapters on all seven projections.
#   LABEL=ours|native   our kernels, or vLLM's (the plugin's HI_MOE_LORA_KERNELS=vllm switch)
#   R=16|64             --max-lora-rank (the adapters stay rank 16)
#   CONCS="64 8"        `vllm bench serve` concurrencies, each: base / one adapter / 16 adapters
#   PROBE=1             greedy probe twice first (run-to-run reference, ours-vs-native compare)
# One server start per call; a warm-up run first keeps kernel compilation out of the figures.
# Results: $OUT/<label>-r<R>-c<C>-{base,one,many}.json and a summary on stdout.
set -u
LABEL=${LABEL:-ours}; OUT=${OUT:-/tmp/hml-out}; PORT=${PORT:-8000}; MODEL=/tmp/m8b; N=16
R=${R:-16}; CONCS=${CONCS:-64 8}; PROBE=${PROBE:-0}
mkdir -p "$OUT"
export PYTHONPATH=/tmp/site VLLM_USE_FLASHINFER_SAMPLER=0 HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
[ -f /tmp/site/plugins/punica.py ] || python3 -m pip install -q --no-deps --no-build-isolation \
  --no-index --target /tmp/site . 2>&1 | tail -2
[ -d $MODEL-adapters ] || python3 .kit/run/make-random-llama.py $MODEL $N 16 > /dev/null 2>&1
KERNELS=ours; [ "$LABEL" = native ] && KERNELS=vllm
TAG="$LABEL-r$R"
ALL=$(for i in $(seq 0 $((N-1))); do echo -n "a$i "; done)
MODS=$(for i in $(seq 0 $((N-1))); do echo -n "a$i=$MODEL-adapters/a$i "; done)
began=$(date +%s)
env VLLM_PLUGINS=hi_moe_lora_kernels HI_MOE_LORA_KERNELS=$KERNELS python3 -m vllm.entrypoints.cli.main \
  serve $MODEL --served-model-name base --enable-lora --max-loras $N --max-cpu-loras $((2*N)) \
  --max-lora-rank $R --lora-modules $MODS --port $PORT --max-model-len 2048 \
  --gpu-memory-utilization 0.85 ${EXTRA_ARGS:-} > "$OUT/$TAG-serve.log" 2>&1 &
SP=$!
for i in $(seq 1 200); do
  sleep 3; curl -s "localhost:$PORT/v1/models" >/dev/null && break
  kill -0 $SP 2>/dev/null || { echo "server died"; tail -40 "$OUT/$TAG-serve.log"; exit 1; }
done
echo "$TAG: server up after $(( $(date +%s) - began )) s"
grep -m3 -i "hi-moe-lora\|Using .*Punica" "$OUT/$TAG-serve.log"
if [ "$PROBE" = 1 ]; then
  python3 benchmarks/kernels/greedy_probe.py --port $PORT --out "$OUT/$TAG-probe1.json" > /dev/null
  python3 benchmarks/kernels/greedy_probe.py --port $PORT --out "$OUT/$TAG-probe2.json" > /dev/null
  python3 benchmarks/kernels/greedy_probe.py --compare "$OUT/$TAG-probe1.json" "$OUT/$TAG-probe2.json"
fi
bench() {  # bench CONCURRENCY PROMPTS RESULT_NAME [--lora-modules ...]
  local c=$1 np=$2 name=$3; shift 3
  python3 -m vllm.entrypoints.cli.main bench serve --backend openai --base-url http://localhost:$PORT \
    --endpoint /v1/completions --model base --tokenizer $MODEL --dataset-name random \
    --random-input-len 256 --random-output-len 128 --num-prompts $np --max-concurrency $c \
    --ignore-eos --save-result --result-dir "$OUT" --result-filename "$name" "$@" > /dev/null 2>&1
}
bench 64 96 "$TAG-warmup.json" --lora-modules $ALL
bench 64 64 "$TAG-warmup1.json" --lora-modules a0   # one-adapter batches meet other sizes
for C in $CONCS; do
  NP=256; [ "$C" -le 16 ] && NP=$((16 * C))
  bench $C $NP "$TAG-c$C-base.json"
  bench $C $NP "$TAG-c$C-one.json" --lora-modules a0
  bench $C $NP "$TAG-c$C-many.json" --lora-modules $ALL
done
kill $SP; wait $SP 2>/dev/null
python3 - "$OUT" "$TAG" $CONCS <<'PY'
import json, sys
res, tag, concs = sys.argv[1], sys.argv[2], sys.argv[3:]
for c in concs:
    base = json.load(open(f"{res}/{tag}-c{c}-base.json"))["output_throughput"]
    for k in ("base", "one", "many"):
        d = json.load(open(f"{res}/{tag}-c{c}-{k}.json"))
        print(f"{tag} c{c:>2} {k:>5}: {d['output_throughput']:8.1f} out tok/s "
              f"({d['output_throughput'] / base:.2f}x base)  median TPOT "
              f"{d['median_tpot_ms']:.2f} ms  prompts {d['completed']}")
PY
echo "$TAG: done after $(( $(date +%s) - began )) s"
