#!/usr/bin/env bash
# The GPU benchmark for vLLM: vLLM 0.26.0 on a lent H200, through tailpod itself
# (`up --provider local --engine vllm`, the pod agent, the gated sweep, `report`, a proven `down`).
# ENGINE=sglang runs the same steps on SGLang 0.5.17 (`up --engine sglang`; MTP is its NEXTN
# path, --speculative-num-steps K, num-draft-tokens K + 1); `gpu_vllm.sh sglang WORK` is `all`
# with it.
#
# The engine and what it imports come as wheels first: benchmarks/gpu_vllm_carry.sh prints the device
# calls that carry and install them into /tmp/site (SITE); WHEELS=benchmarks/gpu_sglang_wheels.txt
# for SGLang. Then, in one call of at most 600 s:
#
#   gpu_vllm.sh env    OUT             machine stamp (GPU, driver, CUDA, torch, vLLM) in OUT/machine.txt
#   gpu_vllm.sh models MODELS          checkpoints of SIZE: mimo (target with its own MTP layer), target,
#                                      draft (BUILD_KINDS); each one's weights sha256 goes to the log
#   gpu_vllm.sh run    MODELS WORK     up (mimo, plain) / benchmark (MTP K sweep) / /metrics / report / down
#   gpu_vllm.sh resume WORK            up again and finish the run id that `run` left unfinished
#   gpu_vllm.sh draft  WORK            the draft-model arm: up (target) / benchmark (draft_model) / down
#   gpu_vllm.sh openloop WORK          the same arms under open-loop arrivals (RATES), with SLOs
#   gpu_vllm.sh peer   WORK            benchmarks/peer_agreement.py against `vllm bench serve`
#   gpu_vllm.sh deploy WORK [RUN]      the decision deployed (#42 item 3): `decide` on RUN (a run dir,
#                                      e.g. benchmarks/runs/h100_*/c256; default WORK's last run id),
#                                      then one `benchmark --spec-k 0,K --deploy decision.json` under
#                                      open-loop arrivals at rates below, at and above the crossover:
#                                      plain and the spec arm each alone on the card, then deploy-lanes
#                                      (both lanes on the one GPU behind HAProxy); the table in
#                                      deploy-table.md. Resumable: run it again on the same WORK.
#   gpu_vllm.sh coldwarm WORK          two starts of one checkpoint on one compile cache (cold, then
#                                      warm), a short sweep and a proven down each (#29);
#                                      WARM_DROPS="triton flashinfer": a start without each
#   gpu_vllm.sh all    WORK            env, models (the mimo kind only, in WORK/models or
#                                      WORK/models-SIZE), run
#   gpu_vllm.sh sglang WORK            all, with ENGINE=sglang
#
# Everything that comes back is written under $OUT as it happens (at most 8 files come back):
# gpu_vllm.log (this script's output, live), machine.txt, metrics-up.txt (/metrics after `up`),
# metrics-end.txt (after the sweep), engine-startup.log (this call's first engine start), engine-logs.tgz
# (every engine log of the run), results.tgz (results dir, up/down JSON, benchmark and report text).
#
# Settings (environment, defaults in brackets):
#   ENGINE [vllm]                      vllm or sglang (`up --engine`)
#   SPEC_K [0,1,2,3]  SPEC_METHOD [mtp]  CONCURRENCY [1,2,4,8,16,32,64]  REPS [3]
#   MAX_TOKENS []  REQUESTS []         empty: tailpod's defaults (256 tokens; max(4, c) requests)
#   EXTEND_K [0]  MAX_K [8]            1: extend K past the best (one engine start per extra K)
#   ENFORCE_EAGER [0]                  0: torch.compile and CUDA graphs, as vLLM runs on a GPU
#   CONTEXT_LENGTH [2048]              the tiny checkpoints' max_position_embeddings
#   DRAFT_SPEC_K [0,2]                 K values of the draft-model and open-loop stages
#   SIZE [tiny]                        checkpoint size (`checkpoint build --size`): tiny, gpu (0.5 B)
#                                      or gpu8b (Qwen3-8B-shaped, 14 GB, built here from the seed);
#                                      non-tiny models go to WORK/models-SIZE
#   BUILD_KINDS ["$MTP_KIND $TARGET_KIND $DRAFT_KIND"]   the kinds `models` builds
#   RATES [4,16,64,256]  SLO [ttft_ms=200,tpot_ms=20]  ARRIVAL [poisson]   (openloop)
#   PEER_LEVELS [1,4,16,64]  PEER_REPS [3]  PEER_MAX_TOKENS [128]  PEER_DEADLINE [480]  (peer)
#   DEPLOY_RATES []  DEPLOY_FACTORS [0.5,1,2]  DEPLOY_REQUESTS []  DEPLOY_SLOTS [256]
#   DEPLOY_DECISION []  DEPLOY_KIND [$MTP_KIND]                                          (deploy)
#                                      empty DEPLOY_RATES: the factors x the request rate at the
#                                      crossover (benchmarks/deploy_step.py rates); empty
#                                      DEPLOY_REQUESTS: 10 s of the middle rate; DEPLOY_DECISION:
#                                      measure this decision.json's deployment instead of the one
#                                      decided on RUN (whose crossover still sets the rates)
#   MTP_KIND [mimo]  TARGET_KIND [target]  DRAFT_KIND [draft]  CHECKPOINT_ARGS []  (checkpoint build)
#   DEADLINE [570]  RESERVE [90]       seconds from the start by which the script ends; seconds kept
#                                      for /metrics, report, down and packing when the sweep is cut
#   STARTUP_TIMEOUT [240]  PORT [8000]  SITE [/tmp/site]  TAILPOD ["python3 -m tailpod.cli.main"]
#   HAPROXY_DIR []                     a carried haproxy's folder (gpu_haproxy_carry.sh), put on PATH
set -euo pipefail

T0=$(date +%s)
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
ENGINE="${ENGINE:-vllm}"
[ "${1:-}" = sglang ] && ENGINE=sglang
case "$ENGINE" in vllm | sglang) ;; *) echo "ENGINE=$ENGINE: vllm or sglang" >&2; exit 2 ;; esac
SPEC_K="${SPEC_K:-0,1,2,3}"
SPEC_METHOD="${SPEC_METHOD:-mtp}"
CONCURRENCY="${CONCURRENCY:-1,2,4,8,16,32,64}"
REPS="${REPS:-3}"
MAX_TOKENS="${MAX_TOKENS:-}"
REQUESTS="${REQUESTS:-}"
EXTEND_K="${EXTEND_K:-0}"
MAX_K="${MAX_K:-8}"
ENFORCE_EAGER="${ENFORCE_EAGER:-0}"
CONTEXT_LENGTH="${CONTEXT_LENGTH:-2048}"
DRAFT_SPEC_K="${DRAFT_SPEC_K:-0,2}"
SIZE="${SIZE:-tiny}"
RATES="${RATES:-4,16,64,256}"
SLO="${SLO:-ttft_ms=200,tpot_ms=20}"
ARRIVAL="${ARRIVAL:-poisson}"
PEER_LEVELS="${PEER_LEVELS:-1,4,16,64}"
PEER_REPS="${PEER_REPS:-3}"
PEER_MAX_TOKENS="${PEER_MAX_TOKENS:-128}"
PEER_DEADLINE="${PEER_DEADLINE:-480}"
DEPLOY_RATES="${DEPLOY_RATES:-}"
DEPLOY_FACTORS="${DEPLOY_FACTORS:-0.5,1,2}"
DEPLOY_REQUESTS="${DEPLOY_REQUESTS:-}"
DEPLOY_SLOTS="${DEPLOY_SLOTS:-256}"
DEPLOY_DECISION="${DEPLOY_DECISION:-}"
MTP_KIND="${MTP_KIND:-mimo}"
TARGET_KIND="${TARGET_KIND:-target}"
DRAFT_KIND="${DRAFT_KIND:-draft}"
CHECKPOINT_ARGS="${CHECKPOINT_ARGS:-}"
DEADLINE="${DEADLINE:-570}"
RESERVE="${RESERVE:-90}"
STARTUP_TIMEOUT="${STARTUP_TIMEOUT:-240}"
PORT="${PORT:-8000}"
SITE="${SITE:-/tmp/site}"
TAILPOD="${TAILPOD:-python3 -m tailpod.cli.main}"
read -ra TP <<< "$TAILPOD"

export PYTHONUNBUFFERED=1
# The carried wheels, then this checkout (tailpod is not installed there: it runs from the tree).
[ -d "$SITE" ] && PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
# A carried haproxy (benchmarks/gpu_haproxy_carry.sh) for the deploy-lanes arm, found on PATH.
[ -n "${HAPROXY_DIR:-}" ] && [ -d "$HAPROXY_DIR" ] && export PATH="$HAPROXY_DIR:$PATH"
export PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}"
# The engine is the image's python3 with PYTHONPATH (inherited by the engine's process group).
TAILPOD_ENGINE_PYTHON="${TAILPOD_ENGINE_PYTHON:-$(command -v python3)}"
export TAILPOD_ENGINE_PYTHON TAILPOD_STARTUP_TIMEOUT="$STARTUP_TIMEOUT"
# SGLang's FA3 from sgl_kernel: by default it first asks the HF Hub for kernels-community/sgl-flash-attn3
# (sglang/kernels/ops/attention/flash_attention_v3.py), which the device cannot reach.
[ "$ENGINE" = sglang ] && export SGLANG_USE_SGL_FA3_KERNEL=1
# Never NVLink multicast (device README); one GPU here, but keep it off regardless.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

say() { printf '[%s +%ss] %s\n' "$(date -u +%H:%M:%S)" "$(( $(date +%s) - T0 ))" "$*" >&2; }
left() { echo $(( DEADLINE - ($(date +%s) - T0) )); }

# Output lands in $OUT (the device tool's folder) or WORK/out, this script's log live among it.
start_out() {  # WORK
    OUT="${OUT:-$1/out}"
    mkdir -p "$OUT"
    exec > >(tee -a "$OUT/gpu_vllm.log") 2>&1
    TEE_PID=$!
    say "gpu_vllm.sh $* (deadline ${DEADLINE} s); PYTHONPATH=$PYTHONPATH"
}

machine() {  # OUT
    local out="$1/machine.txt"
    {
        date -u +%FT%TZ
        nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap,pci.bus_id \
            --format=csv 2>&1 || true
        nvidia-smi 2>&1 | sed -n '1,4p' || true
        nvcc --version 2>&1 | tail -2 || true
        python3 - <<'EOF' 2>&1 || true
import importlib.metadata as md, platform, sys
print("python", platform.python_version(), sys.executable)
import torch
print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())
for name in ("vllm", "sglang", "sglang-kernel", "flashinfer-python", "xgrammar", "transformers", "tokenizers", "triton",
             "numpy", "numba", "pydantic", "fastapi", "openai", "typer", "click", "rich"):
    try:
        print(name, md.version(name))
    except md.PackageNotFoundError:
        print(name, "not installed")
EOF
    } > "$out"
    cat "$out" >&2
}

models() {  # MODELS [KIND...]
    local dir="$1" kind kinds
    shift
    kinds=("$@")
    [ "${#kinds[@]}" -gt 0 ] || read -ra kinds <<< "${BUILD_KINDS:-$MTP_KIND $TARGET_KIND $DRAFT_KIND}"
    mkdir -p "$dir"
    for kind in "${kinds[@]}"; do
        if [ -f "$dir/$kind/config.json" ]; then
            say "$kind (built before): $(cat "$dir/$kind/tailpod-checkpoint.json" 2>/dev/null)"
            continue
        fi
        say "checkpoint build $kind --size $SIZE"
        # (under the image's typer 0.27 `--size` was "No such option" until cli/checkpoint.py
        # stopped giving it a metavar equal to its name)
        # shellcheck disable=SC2086
        "${TP[@]}" checkpoint build "$dir/$kind" --kind "$kind" --size "$SIZE" $CHECKPOINT_ARGS >&2
        say "$kind: $(cat "$dir/$kind/tailpod-checkpoint.json"); $(du -sh "$dir/$kind" | cut -f1)"
    done
    say "checkpoints: $(find "$dir" -mindepth 1 -maxdepth 1 -printf '%f ')"
}

dump_metrics() {  # NAME: the engine's /metrics, as the probe reads it
    python3 - "http://127.0.0.1:$PORT/metrics" "$OUT/metrics-$1.txt" <<'EOF' || return 1
import sys, urllib.request
try:
    with urllib.request.urlopen(sys.argv[1], timeout=10) as r:
        body = r.read()
except OSError as exc:
    sys.exit(f"GET {sys.argv[1]}: {exc}")
open(sys.argv[2], "wb").write(body)
EOF
    say "metrics-$1.txt: $(wc -l < "$OUT/metrics-$1.txt") lines"
}

collect() {  # pack what the run left, whatever state it is in
    local first
    if [ -d "$TAILPOD_HOME/local" ]; then
        first="$(find "$TAILPOD_HOME/local/${tag:-}" -name 'engine-*.log' -printf '%T@ %p\n' 2>/dev/null \
            | sort -n | head -1 | cut -d' ' -f2-)"
        [ -n "$first" ] && cp "$first" "$OUT/engine-startup.log"
        tar czf "$OUT/engine-logs.tgz" -C "$TAILPOD_HOME" local 2>/dev/null || true
    fi
    local keep=()
    mapfile -t keep < <(cd "$work" && find . -maxdepth 1 \( -name results -o -name '*.json' \
        -o -name '*.txt' \) -printf '%f\n')
    [ "${#keep[@]}" -gt 0 ] && tar czf "$OUT/results.tgz" -C "$work" "${keep[@]}"
    say "packed: $(find "$OUT" -maxdepth 1 -type f -printf '%f ')"
}

finish() {  # EXIT trap of run/resume/draft: /metrics, report, a proven down, then pack
    local rc=$?
    trap - EXIT
    if [ -n "${tag:-}" ]; then
        dump_metrics end || say "no /metrics at the end (engine down?)"
    fi
    if [ -n "${rid:-}" ] && [ -f "$TAILPOD_RESULTS_DIR/$rid/rows.jsonl" ]; then
        timeout 45 "${TP[@]}" report "$TAILPOD_RESULTS_DIR/$rid" > "$work/report.txt" 2>&1 \
            || say "report exited non-zero (see report.txt)"
        tail -40 "$work/report.txt" >&2 || true
    fi
    if [ -n "${tag:-}" ]; then
        if timeout 90 "${TP[@]}" down "$tag" --json > "$work/down.json"; then
            say "down: proven ($work/down.json)"
        else
            say "down FAILED: see down.json"
            [ "$rc" = 0 ] && rc=1
        fi
    fi
    collect
    say "done, rc=$rc"
    exec 1>&- 2>&-
    wait "${TEE_PID:-}" 2>/dev/null || true  # the log is complete before the call returns
    exit "$rc"
}

setup_work() {  # WORK
    work="$1"
    mkdir -p "$work"
    export TAILPOD_HOME="$work/home" TAILPOD_RESULTS_DIR="$work/results"
    cd "$repo"
}

up() {  # MODEL: start the plain arm; sets tag
    local model="$1" eager=--no-enforce-eager slots="${CONCURRENCY##*,}" budget
    [ "$ENFORCE_EAGER" = 1 ] && eager=--enforce-eager
    budget=$(( $(left) - RESERVE ))
    [ "$budget" -gt 30 ] || { say "no time left to start the engine ($budget s)"; return 1; }
    say "up: $model ($ENGINE, plain, $eager, context $CONTEXT_LENGTH, $slots slots)"
    timeout "$budget" "${TP[@]}" up --provider local --engine "$ENGINE" --model "$model" \
        --port "$PORT" --context-length "$CONTEXT_LENGTH" --max-running-requests "$slots" \
        "$eager" --spec-k 0 --json > "$work/up.json"
    tag="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["run_tag"])' "$work/up.json")"
    say "up: $tag"
}

sweep() {  # SPEC_K SPEC_METHOD [DRAFT]: the gated sweep, cut at the deadline (resumable)
    local ks="$1" method="$2" draft="${3:-}" budget args=()
    budget=$(( $(left) - RESERVE ))
    [ "$budget" -gt 30 ] || { say "no time left for the sweep ($budget s)"; return 1; }
    [ "$EXTEND_K" = 1 ] && args+=(--extend-k --max-k "$MAX_K") || args+=(--no-extend-k)
    [ -n "$MAX_TOKENS" ] && args+=(--max-tokens "$MAX_TOKENS")
    [ -n "$REQUESTS" ] && args+=(--requests-per-cell "$REQUESTS")
    [ -n "$draft" ] && args+=(--draft-model "$draft")
    # the deployment against each static arm at every rate: no rate skipped once one saturated
    [ -n "${DEPLOY_FILE:-}" ] && args+=(--deploy "$DEPLOY_FILE" --no-saturation-stop)
    if [ "${OPEN_LOOP:-0}" = 1 ]; then
        args+=(--request-rate "$RATES" --arrival "$ARRIVAL" --slo "$SLO")
        say "benchmark $rid: K in $ks ($method), open loop at $RATES req/s ($ARRIVAL), SLO $SLO," \
            "$REPS reps; $budget s left for it"
    else
        args+=(--concurrency "$CONCURRENCY")
        say "benchmark $rid: K in $ks ($method), c in $CONCURRENCY, $REPS reps; $budget s left for it"
    fi
    echo "$rid" > "$work/rid"
    local rc=0
    timeout -k 20 -s INT "$budget" "${TP[@]}" benchmark "$tag" --spec-k "$ks" --spec-method "$method" \
        --reps "$REPS" --run-id "$rid" "${args[@]}" \
        2>&1 | tee -a "$work/benchmark.txt" >&2 || rc=$?
    if [ "$rc" = 124 ] || [ "$rc" = 130 ]; then
        say "benchmark cut at the deadline: finish it with 'gpu_vllm.sh resume $work' (run id $rid)"
    elif [ "$rc" != 0 ]; then
        say "benchmark exited $rc"
    fi
    return "$rc"
}

run() {  # MODELS WORK
    local dir="$1"
    setup_work "$2"
    trap finish EXIT
    up "$dir/$MTP_KIND"
    rid="$tag"
    dump_metrics up || true
    collect  # the first startup log comes back even if the call is cut later
    sweep "$SPEC_K" "$SPEC_METHOD"
}

resume() {  # WORK
    setup_work "$1"
    [ -f "$work/rid" ] || { say "no run id in $work/rid: nothing to resume"; exit 2; }
    rid="$(cat "$work/rid")"
    trap finish EXIT
    up "$(models_dir)/$MTP_KIND"
    sweep "$SPEC_K" "$SPEC_METHOD"
}

models_dir() {  # the checkpoints of this SIZE
    if [ "$SIZE" = tiny ]; then echo "$work/models"; else echo "$work/models-$SIZE"; fi
}

draft() {  # WORK [OPEN_LOOP]: the draft-model arms, closed loop (or open loop with OPEN_LOOP=1)
    setup_work "$1"
    local dir
    dir="$(models_dir)"
    models "$dir"
    trap finish EXIT
    up "$dir/$TARGET_KIND"
    rid="$tag"
    OPEN_LOOP="${2:-0}" sweep "$DRAFT_SPEC_K" draft_model "$dir/$DRAFT_KIND"
}

coldwarm() {  # WORK: cold then warm start on one cache root, as a volume would keep it
    setup_work "$1"
    local dir n t_up
    dir="$(models_dir)"
    models "$dir"
    # A fresh cache root, so the first start is really cold (vLLM's default ~/.cache/vllm may hold
    # an earlier stage's compile); the second start finds what the first wrote, as on a volume.
    # WARM_DROPS (e.g. "triton flashinfer"): one more start per name, each after deleting that one
    # cache, to see which cache a warm start's saving comes from.
    export VLLM_CACHE_ROOT="$work/cache/vllm" TORCHINDUCTOR_CACHE_DIR="$work/cache/inductor" \
        TRITON_CACHE_DIR="$work/cache/triton" FLASHINFER_WORKSPACE_BASE="$work/cache/flashinfer"
    rm -rf "$work/cache"
    local starts=(cold warm) drop
    [ -n "${WARM_DROPS:-}" ] && read -ra starts <<< "cold ${WARM_DROPS}"
    for n in $(seq 1 "${#starts[@]}"); do
        drop="${starts[$((n - 1))]}"
        if [ "$n" -gt 1 ] && [ "$drop" != warm ]; then
            say "start $n: without the $drop cache ($(du -sh "$work/cache/$drop" 2>/dev/null | cut -f1))"
            rm -rf "${work:?}/cache/$drop"
        fi
        t_up=$(date +%s.%N)
        up "$dir/$TARGET_KIND"
        rid="$tag"
        CONCURRENCY=1 REPS=1 REQUESTS=4 sweep 0 mtp || say "sweep $n exited non-zero"
        python3 "$here/first_token.py" "$t_up" "$TAILPOD_RESULTS_DIR/$rid" "$OUT/first-token-$n.json" || true
        # at most 8 files come back: the down proofs stay in WORK, their verdict goes to the log
        if timeout 90 "${TP[@]}" down "$tag" --json > "$work/down-$n.json"; then
            say "down $n: proven"
        else
            say "down $n FAILED: $(tail -c 400 "$work/down-$n.json")"
        fi
        find "$TAILPOD_HOME/local/$tag" -name 'engine-*.log' -exec cp {} "$OUT/engine-$n.log" \; || true
        tag=
    done
    du -sh "$work/cache"/* 2>&1 | sed 's/^/cache: /' >&2 || true
}

peer() {  # WORK: the probe against `vllm bench serve` on one server (CUDA graphs unless eager)
    setup_work "$1"
    local graphs=--cuda-graphs model=()
    [ "$ENFORCE_EAGER" = 1 ] && graphs=
    # a target built before (`models`) is served as is: a gpu8b build costs 14 GB and minutes
    [ -f "$(models_dir)/$TARGET_KIND/config.json" ] && model=(--model "$(models_dir)/$TARGET_KIND")
    say "peer agreement: size $SIZE, levels $PEER_LEVELS, $PEER_REPS reps, $PEER_MAX_TOKENS tokens"
    # shellcheck disable=SC2086
    timeout -k 20 -s INT $(( $(left) - 15 )) "${TP[0]}" "$here/peer_agreement.py" \
        --levels "$PEER_LEVELS" --reps "$PEER_REPS" --max-tokens "$PEER_MAX_TOKENS" \
        --size "$SIZE" $graphs --context-length "$CONTEXT_LENGTH" \
        --deadline-s "$PEER_DEADLINE" "${model[@]}" --json "$OUT/peer.json" 2>&1 \
        | tee "$OUT/peer_agreement.log"
}

deploy() {  # WORK [RUN]: decide on RUN, then the decision against its static arms, open loop
    setup_work "$1"
    local src="${2:-}" dir model dkind k method limit split prev measured rc=0
    if [ -z "$src" ]; then
        [ -f "$work/rid" ] || { say "no RUN given and no run id in $work/rid"; exit 2; }
        src="$TAILPOD_RESULTS_DIR/$(cat "$work/rid")"
    fi
    [ -f "$src/rows.jsonl" ] || { say "$src holds no rows.jsonl: not a run directory"; exit 2; }
    dir="$(models_dir)"
    model="${DEPLOY_KIND:-$MTP_KIND}"
    models "$dir" "$model"
    say "decide $src"
    "${TP[@]}" decide "$src" --out "$work/decision.json" > "$work/decide.txt"
    cat "$work/decide.txt" >&2
    measured="$work/decision.json"
    if [ -n "$DEPLOY_DECISION" ]; then  # measure another deployment; the rates stay RUN's
        cp "$DEPLOY_DECISION" "$work/decision-measured.json"
        measured="$work/decision-measured.json"
        say "measuring the deployment of $DEPLOY_DECISION (given), not the one decided on $src"
    fi
    read -r dkind k method limit < <(python3 - "$measured" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))["deployment"]
spec = d["lanes"][0] if d["kind"] == "lanes" else d
print(d["kind"], spec.get("k") or 0, spec.get("method") or "-", d.get("admission_limit") or "-")
EOF
)
    [ "$dkind" = none ] && { say "the decision deploys nothing (kind none): nothing to measure"; exit 2; }
    [ "$method" = - ] && method="$SPEC_METHOD"
    if [ "$dkind" = lanes ] && ! command -v haproxy >/dev/null \
            && [ ! -x /usr/sbin/haproxy ] && [ ! -x /usr/local/sbin/haproxy ]; then
        say "haproxy is not installed here: the deploy-lanes arm puts both lanes behind it" \
            "(pods/lanes.py); carry one (benchmarks/gpu_haproxy_carry.sh) and set HAPROXY_DIR"
        exit 2
    fi
    if [ -z "$DEPLOY_RATES" ]; then
        DEPLOY_RATES="$(python3 "$here/deploy_step.py" rates "$work/decision.json" "$src" \
            --factors "$DEPLOY_FACTORS")"
    fi
    if [ -z "$DEPLOY_REQUESTS" ]; then  # 10 s of arrivals at the middle rate, at least 32
        DEPLOY_REQUESTS="$(python3 -c 'import sys; r = sorted(float(x) for x in sys.argv[1].split(","))
print(max(32, round(10 * r[len(r) // 2])))' "$DEPLOY_RATES")"
    fi
    split="$("${TP[0]}" -c 'from tailpod.pods.lanes import DEFAULT_LANE_MEM_FRACTION as f; print(f)')"
    say "deployment: $dkind, spec K=$k ($method), admission limit $limit; rates $DEPLOY_RATES" \
        "req/s ($ARRIVAL), $DEPLOY_REQUESTS requests a cell, SLO $SLO, $REPS reps, $DEPLOY_SLOTS slots"
    say "memory: plain and the K=$k arm each alone on the card (vLLM's default share);" \
        "deploy-lanes: both engines on the one GPU, each --gpu-memory-utilization $split" \
        "(pods/lanes.py DEFAULT_LANE_MEM_FRACTION; on a CPU each lane's KV is VLLM_CPU_KVCACHE_SPACE)"
    trap finish EXIT
    [ -f "$work/deploy-rid" ] && say "resuming run $(cat "$work/deploy-rid")"
    CONCURRENCY="$DEPLOY_SLOTS" up "$dir/$model"
    rid="$(cat "$work/deploy-rid" 2>/dev/null || echo "$tag")"
    echo "$rid" > "$work/deploy-rid"
    prev="$(cat "$work/rid" 2>/dev/null || true)"
    OPEN_LOOP=1 RATES="$DEPLOY_RATES" REQUESTS="$DEPLOY_REQUESTS" DEPLOY_FILE="$measured" \
        sweep "0,$k" "$method" || rc=$?
    # sweep wrote the deploy run's id to WORK/rid: `resume` and a later `deploy` keep WORK's own
    if [ -n "$prev" ]; then echo "$prev" > "$work/rid"; else rm -f "$work/rid"; fi
    if python3 "$here/deploy_step.py" table "$TAILPOD_RESULTS_DIR/$rid" > "$OUT/deploy-table.md"; then
        cat "$OUT/deploy-table.md" >&2
    else
        say "no table yet (no open-loop cell finished)"
    fi
    if "${TP[@]}" decide "$TAILPOD_RESULTS_DIR/$rid" --objective goodput \
            --out "$work/decision-after.json" > "$work/decide-after.txt" 2>&1; then
        tail -15 "$work/decide-after.txt" >&2
    else
        say "decide on the deploy run exited non-zero (decide-after.txt)"
    fi
    return "$rc"
}

cmd="${1:-}"
shift || true
case "$cmd" in
    env) start_out "$1"; machine "$OUT" ;;
    models) models "$@" ;;
    run) start_out "$2"; run "$@" ;;
    resume) start_out "$1"; resume "$@" ;;
    draft) start_out "$1"; machine "$OUT"; draft "$@" ;;
    openloop) start_out "$1"; draft "$1" 1 ;;  # the draft-model arms under open-loop arrivals
    peer) start_out "$1"; machine "$OUT"; peer "$@" ;;
    deploy) start_out "$1"; machine "$OUT"; deploy "$@" ;;
    coldwarm) start_out "$1"; machine "$OUT"; coldwarm "$@" ;;
    sglang | all)  # ENGINE=sglang was set at the top for `sglang`
        start_out "$1"
        machine "$OUT"
        work="$1"
        models "$(models_dir)" "$MTP_KIND"
        run "$(models_dir)" "$1"
        ;;
    *) sed -n '2,46p' "$0" >&2; exit 2 ;;
esac
