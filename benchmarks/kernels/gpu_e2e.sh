#!/bin/bash
# End to end on the GPU host (after setup-kit.sh): vLLM 0.26 serving a random Llama-3-8B-shaped
# model with N random rank-16 adapters on all seven projections.
#   LABELS="ours native"  one server per label, all started at once (each on its own port, a
#                       fixed KV cache each), then every run interleaved: the labels compared in
#                       one window, at the cost of one server start. LABEL=... is one label.
#                       ours | native | reference: our kernels, vLLM's (HI_MOE_LORA_KERNELS=vllm)
#                       or float64 LoRA (=reference); ours-jit: ours launched through Triton's
#                       JIT every call (HI_MOE_LORA_DIRECT_LAUNCH=0); ours-fused: ours with the
#                       LoRA inside the base GEMM (HI_MOE_LORA_FUSED_GEMM=on); ours-auto: the
#                       setting left to its default (auto: on where the tile table holds the
#                       GPU; every other label of ours sets it off); a "-spec" suffix
#                       (ours-spec, ours-fused-spec) adds --specialize-active-lora (a CUDA graph
#                       per count of active adapters); a "-dual" suffix (ours-dual, native-dual)
#                       adds vLLM's dual-stream LoRA (VLLM_LORA_ENABLE_DUAL_STREAM=1: the LoRA of
#                       each linear layer on a second stream beside the base GEMM); a "+NAME"
#                       suffix (ours-auto-spec+before-one-launch) serves with the fused GEMM's tile
#                       table benchmarks/kernels/tables/NAME.json (HI_MOE_LORA_GEMM_TILES); an
#                       "@TREE" ending (ours-auto-spec@before) serves the plugin and kernels from
#                       the source tree $TREES/TREE (the server starts in a copy of it, so its
#                       hi_moe_lora/ and plugins/ come first on sys.path; TREES=.kit/trees; make
#                       one with `git archive REV hi_moe_lora plugins | tar -x -C DIR`): one commit's kernels
#                       beside another's in one window
#   R=16|64             --max-lora-rank (the adapters stay rank 16); a label ending in -r<N>
#                       (LABELS="ours ours-r16" with R=64) serves at max rank N instead
#   N=16                adapters served (--max-loras N); make_lora_adapters.py writes the missing
#                       ones when the adapter directory holds fewer. The first 16 are
#                       --lora-modules (vLLM loads those at start, one by one: 1.5-2 s each,
#                       ~5 s with two servers starting, so N=128 that way did not start within a
#                       device call); the others load on first use (the warm-up's) through
#                       vLLM's filesystem resolver (not yet run on the GPU)
#   MANY="$N"           distinct-adapter counts of the "many" runs (each at most N; "many" is N,
#                       a smaller count k is "many<k>")
#   ADAPTERS=DIR        serve the adapters in DIR/a<i> instead (make_dora_adapters.py writes DoRA
#                       copies of the random ones); results then carry "-$ADAPTER_TAG" (default dora)
#   MODEL=DIR           serve another base (default /tmp/m8b; e.g. its AWQ copy from
#                       `python3 -m hi_moe_lora.tiny_awq /tmp/m8b /tmp/m8b-q`, /tmp/m8b-q/awq);
#                       results then carry "-$MODEL_TAG" (default: the directory's name)
#   TP=1                --tensor-parallel-size of every server (results then carry "-tp$TP");
#                       the reference label serves the probes only (no throughput runs: float64)
#   INSTANCE=0          a second copy of this script beside the first (INSTANCE=1, another
#                       CUDA_VISIBLE_DEVICES): its own ports, queue, caches and work folders
#   GPU_SERVERS=N       servers sharing this GPU, all copies together (default: this copy's
#                       labels); two copies on one GPU need it in both, else the first takes
#                       0.85 of the memory and the second's servers fail (2026-11-29)
#   EXTRA_ARGS="..."    more `vllm serve` arguments (e.g. --quantization fp8; tag with MODEL_TAG)
#   CONCS="64 8"        `vllm bench serve` concurrencies, each: base / one adapter / many adapters
#   PROBE=1             greedy + teacher-forced probe first: twice alone, once beside a 16-adapter
#                       load (vLLM's run-to-run reference: the same request in other batches);
#                       PROBE_LABELS="...": only these labels (default: all); each is also compared
#                       with the reference label's first probe when that label is served.
#                       PROBE_COPIES=48: also a "probe-batch" probe, each greedy request sent 48
#                       times at once (decode batches of 48 rows of one adapter: the steps the
#                       LoRA-in-the-GEMM path serves), compared with the reference label's
#   PROFILE="one base"  torch-profile ~1.5 s of a 64-concurrent load each (one adapter, base model,
#                       many: N adapters) and summarize the steps (step_profile.py); a name ending
#                       in "-prefill" (one-prefill, ...) sends 1,024-token prompts for 4 tokens
#                       each instead, so most steps are prefill steps; CONCS="" then skips the
#                       throughput runs. PROFILE_CONC=64: the load's concurrency (8: the
#                       8-concurrent pattern, one prefill step per wave); PROFILE_S=1.5: seconds
#                       profiled; KEEP_TRACE=0: keep no trace (1: the "one" load's, when small);
#                       with "base" among them, each load's decode step is printed as a ratio
#                       to the base step (the period, and the GPU busy time the host's idle
#                       gaps do not move)
# One server start per call; a warm-up run first keeps kernel compilation out of the figures.
# Servers run with OMP_NUM_THREADS=4 unless it is set: five servers on one 32-core machine, each
# with a thread per core, loaded an adapter in 18 s instead of 0.1 (2026-11-28, thirteenth window).
# The prefix cache is off: the random model's 1,000-token vocabulary makes about a third of the
# random prompts collide, and the cache would reuse them per adapter, favouring base and
# one-adapter runs over many-adapter runs (issue 20; ../shared/gpu/README.md).
#   BASE_AGAIN=1        the base model again after the adapter runs ("base-again"); ratios are to
#                       the mean of every base run, and the summary prints how far they drifted
#                       from first to last (what the ratios carry). 0: one base run, first
#   RUNS="base many"    the measured runs and their order (default: base, one, each of MANY,
#                       base-again): the runs that matter first when the deadline may cut the rest.
#                       A name may end in ".<round>" ("base many one base.2 many.2 one.2"): another
#                       round of the same run in one server start; ratios are to the mean of
#                       every base run, and the summary gives each run's rounds (mean, range).
#                       "mixed": each request on the base model or on one adapter, at random
#                       (steps of base rows beside one adapter's, which vLLM counts as two)
#   HOLD=FILE           no measured run begins while FILE exists (work beside the servers' start,
#                       such as a test suite, removes it when done, so it never overlaps a run)
#   RUN_PROMPTS=...     prompts per measured run (default 256; 16 x C at C <= 16, 4 x C above 64):
#                       more prompts, longer runs, steadier ratios
#   DEADLINE_S=560      seconds from the start after which no further measured run begins (a run
#                       skipped for it is named); the device tool ends a call at 600 s, and a run
#                       cut off there leaves nothing. 0: no deadline
#   PACK=NAME.tgz       pack every result and server log into $OUT/NAME.tgz when the script ends,
#                       also by the deadline or a TERM (the device tool returns at most 8 files,
#                       and none whose name holds a label's + or @: use PACK with those labels)
#   COMPILE_THREADS=auto HI_MOE_LORA_COMPILE_THREADS of every server of ours: auto or a count
#                       compiles our kernels' variants on a thread pool before vLLM's capture
#                       (plugins/kernel_warmup.py; its log line is printed with the start-up's),
#                       0 leaves them to the capture (the default before 2026-11-29)
#   CAPTURE_SIZES="..." the batch sizes vLLM captures CUDA graphs for (--cudagraph-capture-sizes;
#                       default vLLM's: 51 sizes up to 512 on an H100, each captured with and
#                       without LoRA). Fewer sizes start a server sooner; a batch between two sizes
#                       is padded to the larger, the same way for the base and the adapter runs
# Results: $OUT/<label>-r<R>[-n<N>]-c<C>-{base,one,many...}.json and a summary on stdout.
set -u
script_began=$(date +%s)
INSTANCE=${INSTANCE:-0}; I=""; [ "$INSTANCE" != 0 ] && I="-i$INSTANCE"  # I: suffix of /tmp paths
LABELS=${LABELS:-${LABEL:-ours}}; OUT=${OUT:-/tmp/hml-out}; PORT=${PORT:-$((8000 + 100 * INSTANCE))}
N=${N:-16}; TP=${TP:-1}
MANY=${MANY:-$N}; RANDOM_MODEL=/tmp/m8b; MODEL=${MODEL:-$RANDOM_MODEL}
R=${R:-16}; CONCS=${CONCS-64 8}; PROBE=${PROBE:-0}; PROFILE=${PROFILE:-}
SERVERS=$(echo $LABELS | wc -w)
# Several servers share the GPU: each gets a fixed KV cache (vLLM's memory profiling would count
# the other server's allocations as its own) and a share of the memory check.
UTIL=${UTIL:-0.85}; KV_ARGS=(); GPU_SERVERS=${GPU_SERVERS:-$SERVERS}
if [ "$GPU_SERVERS" -gt 1 ]; then
  UTIL=$(awk -v n="$GPU_SERVERS" 'BEGIN { printf "%.2f", 0.88 / n }')
  KV_ARGS=(--kv-cache-memory-bytes ${KV_BYTES:-8589934592})
fi
DEADLINE_S=${DEADLINE_S:-560}; RESERVE_S=${RESERVE_S:-60}  # RESERVE_S: room left for one run
if [ -n "${PACK:-}" ]; then  # results into a work folder, packed into $OUT on any exit
  DEST=$OUT; OUT=/tmp/hml-e2e-pack$I; rm -rf "$OUT"; mkdir -p "$DEST"
  trap 'tar czf "$DEST/$PACK" -C "$OUT" . && echo "results packed into $DEST/$PACK"' EXIT
  trap 'exit 143' TERM INT
fi
mkdir -p "$OUT"
export PYTHONPATH=/tmp/site VLLM_USE_FLASHINFER_SAMPLER=0 HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
[ -f /tmp/site/plugins/punica.py ] || python3 -m pip install -q --no-deps --no-build-isolation \
  --no-index --target /tmp/site . 2>&1 | tail -2
[ -d $RANDOM_MODEL-adapters ] || python3 .kit/run/make-random-llama.py $RANDOM_MODEL 16 16 > /dev/null 2>&1
ADAPTERS=${ADAPTERS:-$RANDOM_MODEL-adapters}
[ -f "$ADAPTERS/a$((N-1))/adapter_config.json" ] || python3 benchmarks/kernels/make_lora_adapters.py \
  $RANDOM_MODEL "$ADAPTERS" $N | tail -1
SUFFIX=""; [ "$N" != 16 ] && SUFFIX="-n$N"; [ "$TP" != 1 ] && SUFFIX="$SUFFIX-tp$TP"
[ "$ADAPTERS" != "$RANDOM_MODEL-adapters" ] && SUFFIX="$SUFFIX-${ADAPTER_TAG:-dora}"
[ "$MODEL" != "$RANDOM_MODEL" ] || [ -n "${MODEL_TAG:-}" ] && SUFFIX="$SUFFIX-${MODEL_TAG:-$(basename "$MODEL")}"
STATIC=$((N < 16 ? N : 16))
MODS=$(for i in $(seq 0 $((STATIC-1))); do echo -n "a$i=$ADAPTERS/a$i "; done)
PLUGINS=hi_moe_lora_kernels; RESOLVER_ENV=()
if [ "$N" -gt 16 ]; then  # the rest through vLLM's filesystem resolver, on first use
  PLUGINS=hi_moe_lora_kernels,lora_filesystem_resolver
  RESOLVER_ENV=(VLLM_ALLOW_RUNTIME_LORA_UPDATING=True VLLM_LORA_RESOLVER_CACHE_DIR=$ADAPTERS)
fi
first() { for i in $(seq 0 $(($1-1))); do echo -n "a$i "; done; }  # names of the first $1 adapters
ALL=$(first $N)

declare -A SERVER_PORT SERVER_PID
# the words of the warm-up watch's line for each variant compiled after it (late_compiles.py)
LATE_MARK=$(python3 -c "from hi_moe_lora.kernels.late_compiles import LATE_COMPILE_MARK as m; print(m)")
QUEUE=/tmp/hml-bench-queue$I; rm -rf $QUEUE  # the resident bench imports vLLM while servers start
python3 benchmarks/kernels/bench_resident.py --queue $QUEUE > "$OUT/bench-resident.log" 2>&1 &
RESIDENT_PID=$!
# A label may carry its own --max-lora-rank ("ours-r16" beside R=64: max ranks side by side)
# and its own source tree ("ours-auto-spec@before": $TREES/before).
TREES=${TREES:-$PWD/.kit/trees}
source "$(dirname "$0")/e2e_labels.sh"
began=$(date +%s); index=0
late() {  # late NAME: true (and says so) when NAME would begin past DEADLINE_S - RESERVE_S
  local gone=$(( $(date +%s) - script_began ))
  [ "$DEADLINE_S" -gt 0 ] && [ $gone -gt $((DEADLINE_S - RESERVE_S)) ] \
    && { echo "skipped $1: $gone s gone, DEADLINE_S=$DEADLINE_S"; return 0; }
  return 1
}
for L in $LABELS; do
  TILES_ENV=(); TABLE=$(table_of "$L"); [ -n "$TABLE" ] && TILES_ENV=(HI_MOE_LORA_GEMM_TILES=$PWD/benchmarks/kernels/tables/$TABLE.json)
  # the server's working directory: `python3 -m` puts it first on sys.path, ahead of PYTHONPATH
  # (a copy of a tree: the device tool replaces the checkout's carried folders at every call,
  # and a server whose working directory went away fails on its next import)
  SERVER_DIR=$PWD; TREE=$(tree_of "$L")
  if [ -n "$TREE" ]; then
    [ -d "$TREES/$TREE/hi_moe_lora" ] || { echo "$L: no source tree $TREES/$TREE"; kill $RESIDENT_PID; exit 1; }
    SERVER_DIR=/tmp/hml-tree-$TREE$I; rm -rf "$SERVER_DIR"; cp -r "$TREES/$TREE" "$SERVER_DIR"
  fi
  LK=$(kind_of "${L%%+*}"); KIND=${LK%-dual}; DUAL=0; [ "$KIND" != "$LK" ] && DUAL=1
  DIRECT=""; [ "$KIND" = ours-jit ] && { KIND=ours; DIRECT=0; }  # our kernels through Triton's JIT
  SPEC_ARGS=(); case "$KIND" in *-spec) KIND=${KIND%-spec}; SPEC_ARGS=(--specialize-active-lora) ;; esac
  FUSED=off; [ "$KIND" = ours-fused ] && { KIND=ours; FUSED=on; }  # LoRA inside the base GEMM
  [ "$KIND" = ours-auto ] && { KIND=ours; FUSED=""; }  # the plugin's default (auto) decides
  KERNELS=ours; [ "$KIND" = native ] && KERNELS=vllm; [ "$KIND" = reference ] && KERNELS=reference
  P=$((PORT + index)); index=$((index + 1)); SERVER_PORT[$L]=$P; PROFILER_ARGS=()
  CAPTURE_ARGS=(); [ -n "${CAPTURE_SIZES:-}" ] && CAPTURE_ARGS=(--cudagraph-capture-sizes $CAPTURE_SIZES)
  [ -n "$PROFILE" ] && PROFILER_ARGS=(--profiler-config "{\"profiler\": \"torch\", \"torch_profiler_dir\": \"/tmp/hml-prof-$L$I\", \"torch_profiler_with_stack\": false, \"torch_profiler_dump_cuda_time_total\": false, \"ignore_frontend\": true}")
  # its own compile cache (servers starting together must not write one cache at once) and its
  # own range of internal ports (two servers once drew the same torch.distributed port)
  cd "$SERVER_DIR"
  env VLLM_PLUGINS=$PLUGINS "${RESOLVER_ENV[@]}" "${TILES_ENV[@]}" HI_MOE_LORA_KERNELS=$KERNELS \
    OMP_NUM_THREADS=${OMP_NUM_THREADS:-4} \
    HI_MOE_LORA_DIRECT_LAUNCH=$DIRECT HI_MOE_LORA_FUSED_GEMM=$FUSED \
    HI_MOE_LORA_COMPILE_THREADS=${COMPILE_THREADS:-auto} \
    VLLM_LORA_ENABLE_DUAL_STREAM=$DUAL VLLM_CACHE_ROOT=/tmp/vllm-cache-$L$I \
    VLLM_PORT=$((20000 + 10000 * INSTANCE + 1000 * index)) python3 -m vllm.entrypoints.cli.main \
    serve $MODEL --served-model-name base --enable-lora --max-loras $N --max-cpu-loras $((2*N)) \
    --max-lora-rank $(rank_of "$L") --lora-modules $MODS --port $P --max-model-len 2048 \
    --tensor-parallel-size $TP \
    --no-enable-prefix-caching --gpu-memory-utilization $UTIL "${KV_ARGS[@]}" "${PROFILER_ARGS[@]}" "${CAPTURE_ARGS[@]}" "${SPEC_ARGS[@]}" \
    ${EXTRA_ARGS:-} > "$OUT/$(tag $L)-serve.log" 2>&1 &
  SERVER_PID[$L]=$!; cd "$OLDPWD"
done
for L in $LABELS; do
  for i in $(seq 1 200); do
    sleep 3; curl -s "localhost:${SERVER_PORT[$L]}/v1/models" >/dev/null && break
    kill -0 ${SERVER_PID[$L]} 2>/dev/null || { echo "$L: server died"; tail -40 "$OUT/$(tag $L)-serve.log"; kill $RESIDENT_PID; exit 1; }
    late "the whole run ($L not up)" && { tail -5 "$OUT/$(tag $L)-serve.log"; kill ${SERVER_PID[@]} $RESIDENT_PID; exit 1; }
  done
  echo "$(tag $L): server up after $(( $(date +%s) - began )) s"
  grep -m3 -i "hi-moe-lora\|Using .*Punica\|LoRA in the base GEMM" "$OUT/$(tag $L)-serve.log"
  grep -m1 "narrow B copies for" "$OUT/$(tag $L)-serve.log"
  grep -m1 "kernel variants for\|kernel warm-up failed" "$OUT/$(tag $L)-serve.log"
  LATE=$(grep -c "$LATE_MARK" "$OUT/$(tag $L)-serve.log")
  [ "$LATE" -gt 0 ] && echo "$LATE kernel variants $LATE_MARK (the serve log names them)"
  grep -m2 -i "KV cache memory\|Available KV cache\|GPU KV cache size" "$OUT/$(tag $L)-serve.log"
  # where the start went: weights, torch.compile, CUDA graph capture, the engine's whole start
  grep -i "Model loading took\|torch.compile takes\|Graph capturing finished\|init engine" \
    "$OUT/$(tag $L)-serve.log" | sed 's/^.*\] //' | head -6
done
# Every run draws its own prompts (--seed from its result name): vLLM's prefix cache keeps earlier
# runs' prompts, so a run repeating a warm-up's prompts with the same adapter would skip their
# prefill (the random dataset's first prompts are the same for any --num-prompts under one seed).
# A measured run goes to the resident bench (bench_resident.py: vLLM imported once, not 20-27 s
# per run); a run in the background (a load beside a probe or a profile: RESIDENT=0) and any run
# while the resident one is not there go to vLLM's CLI.
bench() {  # bench LABEL CONCURRENCY PROMPTS RESULT_NAME [--lora-modules ...] (into $RESULTS or $OUT)
  local label=$1 c=$2 np=$3 name=$4 seed; shift 4; seed=$(echo -n "$name" | cksum | cut -d' ' -f1)
  local args=(--backend openai \
    --base-url http://localhost:${SERVER_PORT[$label]} --endpoint /v1/completions --model base \
    --tokenizer $RANDOM_MODEL --dataset-name random --random-input-len ${IN_LEN:-256} \
    --random-output-len ${OUT_LEN:-128} --num-prompts $np --max-concurrency $c --ignore-eos \
    --percentile-metrics ttft,tpot,itl,e2el --metric-percentiles 50,90,99 \
    --seed $seed --save-result --result-dir "${RESULTS:-$OUT}" --result-filename "$name" "$@")
  if [ "${RESIDENT:-1}" = 1 ] && kill -0 $RESIDENT_PID 2>/dev/null; then
    for i in $(seq 1 300); do [ -f $QUEUE/ready ] && break; sleep 0.2; done
    printf '%s\n' "${args[@]}" > $QUEUE/.$name.partial && mv $QUEUE/.$name.partial $QUEUE/$name.args
    while [ ! -f $QUEUE/$name.rc ]; do
      kill -0 $RESIDENT_PID 2>/dev/null || { echo "resident bench died: $OUT/bench-resident.log"; return 1; }
      sleep 0.2
    done
    return $(cat $QUEUE/$name.rc)
  fi
  python3 -m vllm.entrypoints.cli.main bench serve "${args[@]}" > /dev/null 2>&1
}
wait_running() {  # wait_running LABEL COUNT: until the background bench keeps COUNT running (60 s at most)
  for i in $(seq 1 120); do
    n=$(curl -s localhost:${SERVER_PORT[$1]}/metrics | awk '/^vllm:num_requests_running/ {print int($2)}' | head -1)
    [ "${n:-0}" -ge "$2" ] && { sleep 3; return; }; sleep 0.5
  done; echo "load never reached $2 running requests"
}
stop_load() {  # stop_load LABEL: the background bench against LABEL's server (no other copy's)
  pkill -f "bench serve.*--base-url http://localhost:${SERVER_PORT[$1]} "; wait $LOAD 2>/dev/null
}
throughput() { [ "$(kind_of "$1")" != reference ]; }  # the float64 reference serves probes only
for L in $LABELS; do  # every adapter loaded once, then warm-up runs
  throughput $L || continue
  CURLS=()
  for a in $ALL; do
    curl -s -o /dev/null localhost:${SERVER_PORT[$L]}/v1/completions -H 'Content-Type: application/json' \
      -d "{\"model\": \"$a\", \"prompt\": \"warm\", \"max_tokens\": 1}" & CURLS+=($!)
  done; wait "${CURLS[@]}"
  bench $L 64 96 "$(tag $L)-warmup.json" --lora-modules $ALL
  bench $L 64 64 "$(tag $L)-warmup1.json" --lora-modules a0   # one-adapter batches meet other sizes
done
for L in ${PROBE_LABELS:-$LABELS}; do
  [ "$PROBE" = 1 ] || break
  TAG=$(tag $L)
  probe() {  # probe NAME [greedy_probe.py options]
    local name=$1; shift
    python3 benchmarks/kernels/greedy_probe.py --port ${SERVER_PORT[$L]} --out "$OUT/$TAG-$name.json" "$@" > /dev/null
  }
  probe probe1; probe probe2
  RESULTS=/tmp RESIDENT=0 bench $L 64 512 "$TAG-probe-load.json" --lora-modules $(first 16) & LOAD=$!
  wait_running $L 48; probe probe-load; stop_load $L
  [ "${PROBE_COPIES:-1}" -gt 1 ] && probe probe-batch --copies "$PROBE_COPIES"
  for other in probe2 probe-load; do
    echo "$TAG probe1 vs $other:"
    python3 benchmarks/kernels/greedy_probe.py --compare "$OUT/$TAG-probe1.json" "$OUT/$TAG-$other.json"
  done
done
for L in ${PROBE_LABELS:-$LABELS}; do  # every label against float64 LoRA, where it was served
  REF=$OUT/$(tag reference)-probe1.json
  [ "$PROBE" = 1 ] && [ -f "$REF" ] && [ "$(kind_of $L)" != reference ] || continue
  echo "$(tag $L) probe1 vs the reference's:"
  python3 benchmarks/kernels/greedy_probe.py --compare "$REF" "$OUT/$(tag $L)-probe1.json"
  BATCH=$OUT/$(tag $L)-probe-batch.json; REF_BATCH=$OUT/$(tag reference)-probe-batch.json
  [ -f "$BATCH" ] && [ -f "$REF_BATCH" ] || continue
  echo "$(tag $L) probe-batch vs the reference's:"
  python3 benchmarks/kernels/greedy_probe.py --compare "$REF_BATCH" "$BATCH"
done
for L in $LABELS; do
  TAG=$(tag $L); PROF=/tmp/hml-prof-$L$I
  [ "$(kind_of $L)" = reference ] && continue  # (float64 LoRA: its steps are no one's figure)
  for LOAD_NAME in $PROFILE; do
    case $LOAD_NAME in one*) MODS_ARG="--lora-modules a0";; many*) MODS_ARG="--lora-modules $ALL";; *) MODS_ARG="";; esac
    PCONC=${PROFILE_CONC:-64}  # decode-heavy: 60 of 64 requests running before the profile
    LENGTHS=(256 128); PROMPTS=$((16 * PCONC)); RUNNING=$((PCONC * 15 / 16))
    [ "${LOAD_NAME%-prefill}" != "$LOAD_NAME" ] && { LENGTHS=(1024 4); PROMPTS=$((64 * PCONC)); RUNNING=$((PCONC / 8)); }
    rm -rf $PROF
    IN_LEN=${LENGTHS[0]} OUT_LEN=${LENGTHS[1]} RESULTS=/tmp RESIDENT=0 \
      bench $L $PCONC $PROMPTS "$TAG-prof-$LOAD_NAME-load.json" $MODS_ARG & LOAD=$!
    wait_running $L $RUNNING
    curl -s -X POST localhost:${SERVER_PORT[$L]}/start_profile; sleep ${PROFILE_S:-1.5}
    curl -s -X POST localhost:${SERVER_PORT[$L]}/stop_profile; stop_load $L
    TRACE=$(ls -S $PROF/*.pt.trace.json* 2>/dev/null | head -1)
    if [ -z "$TRACE" ]; then echo "$TAG $LOAD_NAME: no trace in $PROF"; ls -la $PROF; continue; fi
    echo "$TAG $LOAD_NAME: trace $(du -h "$TRACE" | cut -f1)"
    GRAPH_MAX=$(echo ${CAPTURE_SIZES:-512} | tr ' ' '\n' | sort -n | tail -1)  # larger steps: no graph
    python3 benchmarks/kernels/step_profile.py "$TRACE" --label "$TAG-$LOAD_NAME" \
      --json "$OUT/$TAG-steps.json" --graph-max-tokens "$GRAPH_MAX"
    [ "${KEEP_TRACE:-1}" = 1 ] && [ "$LOAD_NAME" = one ] && [ $(stat -c %s "$TRACE") -lt 15000000 ] \
      && cp "$TRACE" "$OUT/$TAG-one.trace.json.gz"
    sleep 3
  done
  # each load's decode step against this server's base step (period and GPU busy time)
  case " $PROFILE " in *" base "*) [ -f "$OUT/$TAG-steps.json" ] && python3 \
    benchmarks/kernels/step_profile.py --ratios "$OUT/$TAG-steps.json" --base "$TAG-base" ;; esac
done
KINDS="base one"; for k in $MANY; do [ "$k" = "$N" ] && KINDS="$KINDS many" || KINDS="$KINDS many$k"; done
[ "${BASE_AGAIN:-1}" = 1 ] && KINDS="$KINDS base-again"
KINDS=${RUNS:-$KINDS}  # RUNS="base many one": these runs, in this order
if [ -n "${HOLD:-}" ] && [ -e "$HOLD" ]; then  # (whatever shares the machine finishes first)
  held=$(date +%s); while [ -e "$HOLD" ]; do sleep 2; done
  echo "runs held $(( $(date +%s) - held )) s for $HOLD"
fi
for C in $CONCS; do
  NP=256; [ "$C" -le 16 ] && NP=$((16 * C)); [ "$C" -gt 64 ] && NP=$((4 * C))
  NP=${RUN_PROMPTS:-$NP}
  for K in $KINDS; do
    KB=${K%%.*}  # (a round's run: "many.2" sends what "many" sends)
    case $KB in base*) MODS_ARG="";; one) MODS_ARG="--lora-modules a0";; many) MODS_ARG="--lora-modules $ALL";;
      mixed) MODS_ARG="--lora-modules base a0";;  # (the served model's name: the base model)
      *) MODS_ARG="--lora-modules $(first ${KB#many})";; esac
    for L in $LABELS; do
      throughput $L || continue
      late "$(tag $L)-c$C-$K" && continue
      URL=http://localhost:${SERVER_PORT[$L]}; PHASES=/tmp/hml-phases-$L$I.json
      python3 benchmarks/kernels/run_phases.py snapshot $URL $PHASES
      bench $L $C $NP "$(tag $L)-c$C-$K.json" $MODS_ARG
      python3 benchmarks/kernels/run_phases.py diff $PHASES $URL --into "$OUT/$(tag $L)-c$C-$K.json" > /dev/null
    done
  done
done
for L in $LABELS; do kill ${SERVER_PID[$L]}; done; touch $QUEUE/stop; wait 2>/dev/null
for L in $LABELS; do
  TAG=$(tag $L)
  [ -n "$CONCS" ] && throughput $L && python3 benchmarks/kernels/e2e_summary.py "$OUT" "$TAG" "$KINDS" $CONCS
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
done
echo "$LABELS: done after $(( $(date +%s) - began )) s"
