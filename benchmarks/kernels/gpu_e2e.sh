#!/bin/bash
# End to end on the GPU host (after setup-kit.sh): vLLM 0.26 serving a random Llama-3-8B-shaped
# model with 16 random rank-16 adapters on all seven projections.
#   LABEL=ours|native|reference   our kernels, vLLM's (HI_MOE_LORA_KERNELS=vllm) or float64 LoRA (=reference)
#   R=16|64             --max-lora-rank (the adapters stay rank 16)
#   ADAPTERS=DIR        serve the adapters in DIR/a<i> instead (make_dora_adapters.py writes DoRA
#                       copies of the random ones); results then carry "-$ADAPTER_TAG" (default dora)
#   MODEL=DIR           serve another base (default /tmp/m8b; e.g. its AWQ copy from
#                       `python3 -m hi_moe_lora.tiny_awq /tmp/m8b /tmp/m8b-q`, /tmp/m8b-q/awq);
#                       results then carry "-$MODEL_TAG" (default: the directory's name)
#   EXTRA_ARGS="..."    more `vllm serve` arguments (e.g. --quantization fp8; tag with MODEL_TAG)
#   CONCS="64 8"        `vllm bench serve` concurrencies, each: base / one adapter / 16 adapters
#   PROBE=1             greedy + teacher-forced probe first: twice alone, once beside a 16-adapter
#                       load (vLLM's run-to-run reference: the same request in other batches)
#   PROFILE="one base"  torch-profile ~1.5 s of a 64-concurrent load each (one adapter, base model,
#                       many: 16 adapters) and summarize the steps (step_profile.py); CONCS="" then
#                       skips the throughput runs
# One server start per call; a warm-up run first keeps kernel compilation out of the figures.
# The prefix cache is off: the random model's 1,000-token vocabulary makes about a third of the
# random prompts collide, and the cache would reuse them per adapter, favouring base and
# one-adapter runs over 16-adapter runs (issue 20; ../shared/gpu/README.md).
# Results: $OUT/<label>-r<R>-c<C>-{base,one,many}.json and a summary on stdout.
set -u
LABEL=${LABEL:-ours}; OUT=${OUT:-/tmp/hml-out}; PORT=${PORT:-8000}; N=16
RANDOM_MODEL=/tmp/m8b; MODEL=${MODEL:-$RANDOM_MODEL}
R=${R:-16}; CONCS=${CONCS-64 8}; PROBE=${PROBE:-0}; PROFILE=${PROFILE:-}; PROF=/tmp/hml-prof
mkdir -p "$OUT"
export PYTHONPATH=/tmp/site VLLM_USE_FLASHINFER_SAMPLER=0 HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
[ -f /tmp/site/plugins/punica.py ] || python3 -m pip install -q --no-deps --no-build-isolation \
  --no-index --target /tmp/site . 2>&1 | tail -2
[ -d $RANDOM_MODEL-adapters ] || python3 .kit/run/make-random-llama.py $RANDOM_MODEL $N 16 > /dev/null 2>&1
KERNELS=ours; [ "$LABEL" = native ] && KERNELS=vllm; [ "$LABEL" = reference ] && KERNELS=reference
TAG="$LABEL-r$R"; ADAPTERS=${ADAPTERS:-$RANDOM_MODEL-adapters}
[ "$ADAPTERS" != "$RANDOM_MODEL-adapters" ] && TAG="$TAG-${ADAPTER_TAG:-dora}"
[ "$MODEL" != "$RANDOM_MODEL" ] || [ -n "${MODEL_TAG:-}" ] && TAG="$TAG-${MODEL_TAG:-$(basename "$MODEL")}"
MODS=$(for i in $(seq 0 $((N-1))); do echo -n "a$i=$ADAPTERS/a$i "; done)
ALL=$(for i in $(seq 0 $((N-1))); do echo -n "a$i "; done)

PROFILER_ARGS=()
[ -n "$PROFILE" ] && PROFILER_ARGS=(--profiler-config "{\"profiler\": \"torch\", \"torch_profiler_dir\": \"$PROF\", \"torch_profiler_with_stack\": false, \"torch_profiler_dump_cuda_time_total\": false, \"ignore_frontend\": true}")
began=$(date +%s)
env VLLM_PLUGINS=hi_moe_lora_kernels HI_MOE_LORA_KERNELS=$KERNELS python3 -m vllm.entrypoints.cli.main \
  serve $MODEL --served-model-name base --enable-lora --max-loras $N --max-cpu-loras $((2*N)) \
  --max-lora-rank $R --lora-modules $MODS --port $PORT --max-model-len 2048 \
  --no-enable-prefix-caching --gpu-memory-utilization 0.85 "${PROFILER_ARGS[@]}" ${EXTRA_ARGS:-} > "$OUT/$TAG-serve.log" 2>&1 &
SP=$!
for i in $(seq 1 200); do
  sleep 3; curl -s "localhost:$PORT/v1/models" >/dev/null && break
  kill -0 $SP 2>/dev/null || { echo "server died"; tail -40 "$OUT/$TAG-serve.log"; exit 1; }
done
echo "$TAG: server up after $(( $(date +%s) - began )) s"
grep -m3 -i "hi-moe-lora\|Using .*Punica" "$OUT/$TAG-serve.log"
# Every run draws its own prompts (--seed from its result name): vLLM's prefix cache keeps earlier
# runs' prompts, so a run repeating a warm-up's prompts with the same adapter would skip their
# prefill (the random dataset's first prompts are the same for any --num-prompts under one seed).
bench() {  # bench CONCURRENCY PROMPTS RESULT_NAME [--lora-modules ...] (into $RESULTS or $OUT)
  local c=$1 np=$2 name=$3 seed; shift 3; seed=$(echo -n "$name" | cksum | cut -d' ' -f1)
  python3 -m vllm.entrypoints.cli.main bench serve --backend openai --base-url http://localhost:$PORT \
    --endpoint /v1/completions --model base --tokenizer $RANDOM_MODEL --dataset-name random \
    --random-input-len 256 --random-output-len 128 --num-prompts $np --max-concurrency $c \
    --ignore-eos --seed $seed --save-result --result-dir "${RESULTS:-$OUT}" --result-filename "$name" "$@" \
    > /dev/null 2>&1
}
wait_running() {  # until the background bench keeps at least $1 requests running (60 s at most)
  for i in $(seq 1 120); do
    n=$(curl -s localhost:$PORT/metrics | awk '/^vllm:num_requests_running/ {print int($2)}' | head -1)
    [ "${n:-0}" -ge "$1" ] && { sleep 3; return; }; sleep 0.5
  done; echo "load never reached $1 running requests"
}
stop_load() { pkill -f "cli.main bench serve"; wait $LOAD 2>/dev/null; }  # the background bench
bench 64 96 "$TAG-warmup.json" --lora-modules $ALL
bench 64 64 "$TAG-warmup1.json" --lora-modules a0   # one-adapter batches meet other sizes
if [ "$PROBE" = 1 ]; then
  probe() { python3 benchmarks/kernels/greedy_probe.py --port $PORT --out "$OUT/$TAG-$1.json" > /dev/null; }
  probe probe1; probe probe2
  RESULTS=/tmp bench 64 512 "$TAG-probe-load.json" --lora-modules $ALL & LOAD=$!
  wait_running 48; probe probe-load; stop_load
  for other in probe2 probe-load; do
    echo "$TAG probe1 vs $other:"
    python3 benchmarks/kernels/greedy_probe.py --compare "$OUT/$TAG-probe1.json" "$OUT/$TAG-$other.json"
  done
fi
for LOAD_NAME in $PROFILE; do
  case $LOAD_NAME in one) MODS_ARG="--lora-modules a0";; many) MODS_ARG="--lora-modules $ALL";; *) MODS_ARG="";; esac
  rm -rf $PROF; RESULTS=/tmp bench 64 1024 "$TAG-prof-$LOAD_NAME-load.json" $MODS_ARG & LOAD=$!
  wait_running 60; curl -s -X POST localhost:$PORT/start_profile; sleep 1.5
  curl -s -X POST localhost:$PORT/stop_profile; stop_load
  TRACE=$(ls -S $PROF/*.pt.trace.json* 2>/dev/null | head -1)
  if [ -z "$TRACE" ]; then echo "$TAG $LOAD_NAME: no trace in $PROF"; ls -la $PROF; continue; fi
  echo "$TAG $LOAD_NAME: trace $(du -h "$TRACE" | cut -f1)"
  python3 benchmarks/kernels/step_profile.py "$TRACE" --label "$TAG-$LOAD_NAME" --json "$OUT/$TAG-steps.json"
  [ "$LOAD_NAME" = one ] && [ $(stat -c %s "$TRACE") -lt 15000000 ] && cp "$TRACE" "$OUT/$TAG-one.trace.json.gz"
  sleep 3
done
for C in $CONCS; do
  NP=256; [ "$C" -le 16 ] && NP=$((16 * C))
  bench $C $NP "$TAG-c$C-base.json"
  bench $C $NP "$TAG-c$C-one.json" --lora-modules a0
  bench $C $NP "$TAG-c$C-many.json" --lora-modules $ALL
done
kill $SP; wait $SP 2>/dev/null
[ -n "$CONCS" ] && python3 - "$OUT" "$TAG" $CONCS <<'PY'
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
# DoRA: how long each activation's scales took, and a quantized base's one-off row norms
python3 - "$OUT/$TAG-serve.log" <<'PY'
import re, statistics, sys
text = open(sys.argv[1], errors="replace").read()
times = [float(t) for t in re.findall(r"DoRA scales of adapter \d+ computed in ([0-9.]+) ms", text)]
if times:
    print(f"DoRA activations: {len(times)}, first {times[0]:.1f} ms, median "
          f"{statistics.median(times):.1f} ms, max {max(times):.1f} ms, all {times}")
for line in re.findall(r"DoRA: row norms of .*", text):
    print(line)
PY
echo "$TAG: done after $(( $(date +%s) - began )) s"
