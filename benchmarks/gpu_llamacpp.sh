#!/usr/bin/env bash
# The GPU benchmark: llama.cpp's llama-server on your own CUDA Linux box, through tailpod.
#
# From a llama.cpp source tree to a proven `down`, in stages you can run one by one:
#
#   gpu_llamacpp.sh trim   SRC OUT.tgz      a trimmed copy of SRC for a CUDA llama-server build
#   gpu_llamacpp.sh build  SRC BUILD        CUDA llama-server (static) in BUILD/bin
#   gpu_llamacpp.sh models SRC MODELS       random-weight target + draft GGUFs (benchmarks/gguf_models.py)
#   gpu_llamacpp.sh capture BIN MODELS OUT  raw llama-server logs and API answers (parser fixtures)
#   gpu_llamacpp.sh run    BIN MODELS WORK  tailpod up / benchmark / report / agreement / peer / down
#   gpu_llamacpp.sh all    SRC WORK         build, models, run
#
# Settings (environment, defaults in brackets):
#   PRESET [8b]            model size: tiny, 1b or 8b (8b: Llama-3-8B's shape, 16 GB in f16)
#   SPEC_K [0,2,4]         the K values of the sweep (0 = plain decode)
#   CONCURRENCY [1,2,4,8]  REPS [3]  MAX_TOKENS [128]  REQUESTS [16] (requests per cell)
#   MAX_K [8]              the sweep extends K past the best up to this
#   PEER [1]               then llamacpp_peer.py (httpx) on the plain arm, the same workload (0: skip)
#   GPU_COUNT [1]          GPUs to split the model across (llama.cpp --split-mode / --tensor-split)
#   SPLIT_MODE [layer]     layer or row, when GPU_COUNT > 1
#   CUDA_ARCH [90]         CMAKE_CUDA_ARCHITECTURES (90: H100/H200)
#   PORT [8000]  TAILPOD ["python3 -m tailpod.cli.main"]
#
# docs/benchmarks.md (section "gpu_llamacpp.sh") shows a run on an H200 and its figures.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
PRESET="${PRESET:-8b}"
SPEC_K="${SPEC_K:-0,2,4}"
CONCURRENCY="${CONCURRENCY:-1,2,4,8}"
REPS="${REPS:-3}"
MAX_TOKENS="${MAX_TOKENS:-128}"
REQUESTS="${REQUESTS:-16}"
MAX_K="${MAX_K:-8}"
PEER="${PEER:-1}"
GPU_COUNT="${GPU_COUNT:-1}"
SPLIT_MODE="${SPLIT_MODE:-layer}"
CUDA_ARCH="${CUDA_ARCH:-90}"
PORT="${PORT:-8000}"
TAILPOD="${TAILPOD:-python3 -m tailpod.cli.main}"
# Never let a server we start use NVLink multicast (NCCL NVLS): on shared multi-GPU hosts it can
# take the GPUs out of service. llama.cpp is built without NCCL here, but keep it off regardless.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

say() { printf '[%s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

trim() {  # SRC OUT.tgz
    local src="$1" out="$2" tmp
    tmp="$(mktemp -d)"
    cp -a "$src/." "$tmp/"
    (cd "$tmp" && rm -rf .git docs tests examples benches app .github pocs media)
    find "$tmp/models" -maxdepth 1 -type f ! -name ggml-vocab-llama-bpe.gguf -delete
    for backend in cann et hexagon hip metal musa opencl openvino sycl virtgpu vulkan webgpu zdnn zendnn; do
        rm -rf "$tmp/ggml/src/ggml-$backend"
    done
    tar czf "$out" -C "$tmp" .
    rm -rf "$tmp"
    say "trimmed source: $out ($(du -h "$out" | cut -f1))"
}

build() {  # SRC BUILD
    local src="$1" build="$2"
    command -v nvcc >/dev/null || { echo "nvcc not found: a CUDA toolkit is needed" >&2; exit 2; }
    # LLAMA_USE_PREBUILT_UI defaults ON and downloads the web UI; static: one file to carry.
    # A source tree without .git builds as "b0-unknown": LLAMA_BUILD_COMMIT=<hash> names it.
    cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
        ${LLAMA_BUILD_COMMIT:+-DLLAMA_BUILD_COMMIT="$LLAMA_BUILD_COMMIT"} \
        -DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCH" -DGGML_NATIVE=OFF -DLLAMA_OPENSSL=OFF \
        -DLLAMA_USE_PREBUILT_UI=OFF -DGGML_CUDA_NCCL=OFF -DLLAMA_BUILD_TESTS=OFF \
        -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF -DBUILD_SHARED_LIBS=OFF >&2
    ninja -C "$build" -j"$(nproc)" llama-server >&2
    strip "$build/bin/llama-server" || true
    "$build/bin/llama-server" --version >&2 || true
}

models() {  # SRC MODELS
    local src="$1" dir="$2"
    mkdir -p "$dir"
    for p in "$PRESET" "$PRESET-draft"; do
        [ -s "$dir/$p.gguf" ] && continue
        PYTHONPATH="$src/gguf-py${PYTHONPATH:+:$PYTHONPATH}" \
            python3 "$here/gguf_models.py" --src "$src" --preset "$p" --out "$dir/$p.gguf"
    done
}

capture() {  # BIN MODELS OUT: the raw server, plain and draft-model speculative
    local bin="$1" dir="$2" out="$3" common
    common=(-m "$dir/$PRESET.gguf" --alias tailpod -ngl 999 --ctx-size 8192 --parallel 4 --metrics)
    python3 "$here/llamacpp_capture.py" --name plain --out "$out" -- \
        "$bin/llama-server" "${common[@]}"
    python3 "$here/llamacpp_capture.py" --name spec --out "$out" -- \
        "$bin/llama-server" "${common[@]}" --spec-type draft-simple \
        --spec-draft-model "$dir/$PRESET-draft.gguf" -ngld 999 --spec-draft-n-max 4
}

run() {  # BIN MODELS WORK
    # tag and work stay global: the EXIT trap that takes the engine down reads them.
    local bin="$1" dir="$2" slots ctx rid split=()
    work="$3"
    mkdir -p "$work"
    export TAILPOD_HOME="$work/home" TAILPOD_RESULTS_DIR="$work/results"
    slots="${CONCURRENCY##*,}"        # one slot per request at the highest concurrency
    ctx=$((slots * 2048))             # llama-server divides the context among its slots
    [ "$GPU_COUNT" -gt 1 ] && split=(--split-mode "$SPLIT_MODE")
    cd "$repo"
    say "up: $PRESET on $GPU_COUNT GPU(s)"
    $TAILPOD up --provider local --engine llamacpp --llama-server "$bin/llama-server" \
        --model "$dir/$PRESET.gguf" --port "$PORT" --context-length "$ctx" \
        --max-running-requests "$slots" --gpu-count "$GPU_COUNT" "${split[@]}" \
        --json > "$work/up.json"
    tag="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["run_tag"])' "$work/up.json")"
    rid="$tag"
    # Whatever happens next, the engine goes down and the proof is written.
    trap '$TAILPOD down "$tag" --json > "$work/down.json" || say "down FAILED: see $work/down.json"' EXIT
    say "benchmark: K in $SPEC_K, c in $CONCURRENCY, $REPS reps"
    $TAILPOD benchmark "$tag" --spec-k "$SPEC_K" --spec-method draft_model \
        --draft-model "$dir/$PRESET-draft.gguf" --concurrency "$CONCURRENCY" --reps "$REPS" \
        --max-tokens "$MAX_TOKENS" --requests-per-cell "$REQUESTS" --max-k "$MAX_K" --run-id "$rid" \
        | tee "$work/benchmark.txt" >&2
    $TAILPOD report "$TAILPOD_RESULTS_DIR/$rid" | tee "$work/report.txt" >&2
    python3 "$here/llamacpp_agreement.py" "$TAILPOD_RESULTS_DIR/$rid" --json "$work/agreement.json" \
        | tee "$work/agreement.txt" >&2
    if [ "$PEER" = 1 ]; then  # the same workload from an independent client, on the plain arm
        $TAILPOD up --relaunch "$tag" --spec-k 0 --json > "$work/relaunch-plain.json"
        python3 "$here/llamacpp_peer.py" --base-url "http://127.0.0.1:$PORT" --levels "$CONCURRENCY" \
            --requests "$REQUESTS" --max-tokens "$MAX_TOKENS" --reps "$REPS" --json "$work/peer.json" \
            | tee "$work/peer.txt" >&2
    fi
    trap - EXIT
    cp "$TAILPOD_HOME/local/$tag"/engine-*.log "$work/" || true
    $TAILPOD down "$tag" --json > "$work/down.json"
    say "down: proven ($work/down.json)"
}

cmd="${1:-}"
shift || true
case "$cmd" in
    trim) trim "$@" ;;
    build) build "$@" ;;
    models) models "$@" ;;
    capture) capture "$@" ;;
    run) run "$@" ;;
    all)
        src="$1" work="$2"
        build "$src" "$work/build"
        models "$src" "$work/models"
        run "$work/build/bin" "$work/models" "$work"
        ;;
    *) sed -n '2,22p' "$0" >&2; exit 2 ;;
esac
