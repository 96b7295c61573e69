#!/usr/bin/env bash
# Carry an engine's wheels (vLLM 0.26.0 by default, or SGLang 0.5.17: WHEELS=
# benchmarks/gpu_sglang_wheels.txt) and what tailpod imports at start to a lent GPU machine, which
# reaches no package registry: wheels travel in the device tool's `carry`, at most 64 MiB a call
# (the working tree included), and a warm machine keeps /tmp for about 30 s between calls.
#
#   gpu_vllm_carry.sh download   pip download the pinned wheels (WHEELS) into CARRY_DIR/wheels
#                                (CPython 3.12, manylinux x86_64, --no-deps)
#   gpu_vllm_carry.sh split      tar them, split the tar into equal parts under MAX_PART_MIB, one
#                                folder per part (CARRY_DIR/parts/pNN), with MANIFEST.sha256 in each
#   gpu_vllm_carry.sh plan       print the device calls as JSON lines {"call","carry","command",...}
#                                (also written to CARRY_DIR/plan.jsonl)
#   gpu_vllm_carry.sh all        download (what is missing), split, plan   [default]
#
# The calls must go back to back: call 1 starts the machine and clears /tmp/carry, each call k
# copies part k there and checks its sha256, and the last part's call also reassembles the tar,
# checks every wheel, installs them all with one `pip install --target /tmp/site`, and imports
# the engine. If a call reports "no /tmp/carry", the machine was given back in between: start
# again at call 1. Then `bash benchmarks/gpu_vllm.sh all ...` (the next line of the plan) uses
# /tmp/site.
#
# What differs between engines lives in the wheel list, as `#@ key: value` lines (the plan reads
# them): `engine` (the module imported and version-checked, and gpu_vllm.sh's ENGINE), `imports`
# (the modules the last call imports, tailpod.cli.main added), `unchecked` (a regex of the
# packages left out on purpose, whose `pip check` lines are dropped).
#
# Settings: WHEELS [benchmarks/gpu_vllm_wheels.txt]  the pinned list (relative to this checkout)
#           MAX_PART_MIB [58] (the tree travels too: ~7 MiB now; 64 MiB is the limit; an H100
#             call on 2026-12-06 needed parts of 47 MiB)
#           PYTHON [python3] (any pip >= 22 works; the target interpreter is given by the flags)
#           CARRY_REPO [this checkout]  the checkout whose tree the device tool sends (a helper's
#             worktree is not it: the session's own checkout is, .library/device/README.md)
#           CARRY_DIR [.whl-vllm]  the folder in CARRY_REPO for wheels and parts; must be ignored
#             (`echo /.whl-vllm/ >> .git/info/exclude`; .gitignore already ignores .whl/, so
#             CARRY_DIR=.whl/sglang needs nothing)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="${CARRY_REPO:-$(dirname "$here")}"
CARRY_DIR="${CARRY_DIR:-.whl-vllm}"
dir="$repo/$CARRY_DIR"
WHEELS="${WHEELS:-benchmarks/gpu_vllm_wheels.txt}"
case "$WHEELS" in /*) list="$WHEELS" ;; *) list="$(dirname "$here")/$WHEELS" ;; esac
[ -f "$list" ] || { echo "WHEELS=$WHEELS: no such file ($list)" >&2; exit 2; }
MAX_PART_MIB="${MAX_PART_MIB:-58}"
PYTHON="${PYTHON:-python3}"
LIMIT_MIB=64

say() { printf '[gpu_vllm_carry] %s\n' "$*" >&2; }

pins() { sed -e 's/#.*//' -e 's/[[:space:]]//g' "$list" | grep -v '^$'; }

platforms() {
    local n
    for n in $(seq 17 39); do printf -- '--platform manylinux_2_%s_x86_64 ' "$n"; done
    printf -- '--platform manylinux2014_x86_64 --platform manylinux2010_x86_64 --platform manylinux1_x86_64'
}

check_ignored() {
    git -C "$repo" check-ignore -q "$dir/" || {
        echo "$dir is not ignored by git: echo /$CARRY_DIR/ >> $repo/.git/info/exclude" >&2
        exit 2
    }
}

# One wheel per pinned name, at the pinned version, and nothing else in the folder.
verify_wheels() {
    "$PYTHON" - "$dir/wheels" "$list" <<'EOF'
import os, re, sys
from packaging.utils import canonicalize_name, parse_wheel_filename
folder, listing = sys.argv[1], sys.argv[2]
pins = {}
for line in open(listing):
    line = re.sub(r"#.*", "", line).strip()
    if line:
        name, version = line.split("==")
        pins[canonicalize_name(name)] = version
found, bad = {}, []
for f in sorted(os.listdir(folder)):
    if not f.endswith(".whl"):
        continue
    name, version, _, _ = parse_wheel_filename(f)
    n = canonicalize_name(name)
    if n in found:
        bad.append(f"two wheels of {n}: {found[n]} and {f}")
    found[n] = f
    if n not in pins:
        bad.append(f"{f} is not in the list")
    elif str(version) != pins[n]:
        bad.append(f"{f}: the list pins {pins[n]}")
bad += [f"missing: {n}=={v}" for n, v in pins.items() if n not in found]
total = sum(os.path.getsize(os.path.join(folder, f)) for f in found.values())
print(f"{len(found)} wheels, {total / 2**20:.1f} MiB", file=sys.stderr)
if bad:
    print("\n".join(bad), file=sys.stderr)
    sys.exit(1)
EOF
}

download() {
    check_ignored
    mkdir -p "$dir/wheels"
    # shellcheck disable=SC2046
    "$PYTHON" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp $(platforms) -d "$dir/wheels" -r <(pins) 2>&1 \
        | grep -v "^WARNING: Location 'file://" >&2 || true
    verify_wheels
}

# Bytes that travel with every call besides the carry: tracked and untracked-not-ignored files.
tree_bytes() {
    (cd "$repo" && git ls-files -z --cached --others --exclude-standard \
        | xargs -0 stat -c %s 2>/dev/null | awk '{s += $1} END {print s + 0}')
}

split_parts() {
    check_ignored
    verify_wheels
    local tar="$dir/wheels.tar" size n chunk k tree
    rm -rf "$dir/parts" "$tar"
    # Reproducible tar: sorted, no owners, fixed mtimes (the wheels themselves are compressed).
    tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -cf "$tar" -C "$dir" wheels
    size=$(stat -c %s "$tar")
    n=$(( (size + MAX_PART_MIB * 1048576 - 1) / (MAX_PART_MIB * 1048576) ))
    chunk=$(( (size + n - 1) / n ))
    mkdir -p "$dir/parts"
    split -b "$chunk" -d -a 2 --numeric-suffixes=1 "$tar" "$dir/parts/wheels.tar.part"
    (
        cd "$dir/parts"
        sha256sum wheels.tar.part??
        (cd "$dir" && sha256sum wheels.tar && sha256sum wheels/*.whl)
    ) > "$dir/MANIFEST.sha256"
    for k in $(seq -f %02g 1 "$n"); do
        mkdir -p "$dir/parts/p$k"
        mv "$dir/parts/wheels.tar.part$k" "$dir/parts/p$k/"
        cp "$dir/MANIFEST.sha256" "$dir/parts/p$k/"
    done
    rm -f "$tar"
    tree=$(tree_bytes)
    say "wheels.tar: $(awk -v b="$size" 'BEGIN {printf "%.1f", b / 1048576}') MiB in $n parts of" \
        "<= $(awk -v b="$chunk" 'BEGIN {printf "%.1f", b / 1048576}') MiB;" \
        "the tree that travels with each: $(awk -v b="$tree" 'BEGIN {printf "%.1f", b / 1048576}') MiB"
    for k in $(seq -f %02g 1 "$n"); do
        local bytes
        bytes=$(( tree + $(du -cb "$dir/parts/p$k" | tail -1 | cut -f1) ))
        if [ "$bytes" -ge $(( LIMIT_MIB * 1048576 )) ]; then
            say "call $k would send $((bytes / 1048576)) MiB, over the $LIMIT_MIB MiB limit: lower MAX_PART_MIB"
            exit 1
        fi
    done
}

plan() {
    [ -f "$dir/MANIFEST.sha256" ] || { say "no parts yet: run '$0 split' first"; exit 2; }
    local n
    n=$(find "$dir/parts" -mindepth 1 -maxdepth 1 -type d -name 'p[0-9][0-9]' | wc -l)
    "$PYTHON" - "$n" "$CARRY_DIR" "$list" <<'EOF' | tee "$dir/plan.jsonl"
import json, re, sys
n, cdir, listing = int(sys.argv[1]), sys.argv[2], sys.argv[3]
# The engine's facts, from the list's `#@ key: value` lines.
keys = dict(m.groups() for m in re.finditer(r"^#@ *(\w+): *(.*?) *$", open(listing).read(), re.M))
missing = {"engine", "imports", "unchecked"} - keys.keys()
if missing:
    sys.exit(f"{listing} has no '#@ {sorted(missing)[0]}:' line")
engine = keys["engine"]
if not re.fullmatch(r"[a-z_]+", engine) or not re.fullmatch(r"[\w., ]+", keys["imports"]):
    sys.exit(f"{listing}: '#@ engine' / '#@ imports' must be module names")
if not re.fullmatch(r"[\w.|()\[\]+-]+", keys["unchecked"]):
    sys.exit(f"{listing}: '#@ unchecked' must be a regex of package names (it is quoted in sh)")
gone = ("test -d /tmp/carry || { echo 'no /tmp/carry: this is not the warm machine of call 1; "
        "start again at call 1'; exit 3; }")
# pip check lines about the packages deliberately left behind (the list's `#@ unchecked`)
skipped = keys["unchecked"]
probe = ("{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; "
         "python3 -V; python3 -m pip list --format=freeze 2>/dev/null | grep -iE "
         "'^(torch|triton|numpy|numba|protobuf|setuptools|typing.extensions|packaging|anyio|"
         "aiohttp|transformers|tokenizers|huggingface.hub|pydantic|opencv-python-headless|"
         "typer|click|rich|timm)=='; "
         "} || true; ")
lines = []
for k in range(1, n + 1):
    p = f"{k:02d}"
    copy = (f"cp {cdir}/parts/p{p}/* /tmp/carry/; cd /tmp/carry; "
            f"grep ' wheels.tar.part{p}$' MANIFEST.sha256 | sha256sum -c -; ")
    install = ("grep ' wheels.tar.part' MANIFEST.sha256 | sha256sum -c -; "
               "cat wheels.tar.part?? > wheels.tar; rm wheels.tar.part??; "
               "grep ' wheels.tar$' MANIFEST.sha256 | sha256sum -c -; "
               "tar -xf wheels.tar; rm wheels.tar; "
               "grep ' wheels/' MANIFEST.sha256 | sha256sum -c --quiet -; "
               "echo \"$(ls wheels | wc -l) wheels checked\"; "
               "python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir "
               "--upgrade --target /tmp/site wheels/*.whl; cd \"$R\"; export PYTHONPATH=/tmp/site; "
               f"python3 -c 'import {engine}; print({engine}.__version__)'; "
               f"PYTHONPATH=/tmp/site:$PWD python3 -c 'import {keys['imports']}, "
               "tailpod.cli.main; print(\"imports ok\")'; "
               f"python3 -m pip check 2>&1 | grep -viE 'requires ({skipped}),' | head -40 || true")
    # call 1 starts afresh; a later call checks the parts before it; the last one installs
    # (a list that fits one part does both in its one call)
    if k == 1:
        cmd = ("set -e; R=$PWD; " + probe + "rm -rf /tmp/carry /tmp/site; mkdir -p /tmp/carry; "
               + copy + ("df -h /tmp | tail -1" if k < n else install))
    elif k < n:
        have = " ".join(f"{i:02d}" for i in range(1, k))
        cmd = (f"set -e; {gone}; for i in {have}; do test -f /tmp/carry/wheels.tar.part$i "
               f"|| {{ echo \"part $i is missing: start again at call 1\"; exit 3; }}; done; "
               + copy + "ls /tmp/carry")
    else:
        cmd = f"set -e; R=$PWD; {gone}; " + copy + install
    lines.append({"call": k, "carry": [f"{cdir}/parts/p{p}"], "command": cmd,
                  "timeout_s": 300 if k == n else 120,
                  "note": f"part {k} of {n}" + ("; reassemble, check, install into /tmp/site"
                                                if k == n else "")})
bench = (f"export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1; test -f /tmp/site/{engine}/__init__.py || "
         f"{{ echo '{engine} is not installed on this machine: run the carry calls again'; exit 3; }}; "
         f"ENGINE={engine} bash benchmarks/gpu_vllm.sh all /tmp/tailpod-gpu")
lines.append({"call": n + 1, "carry": [], "command": bench, "timeout_s": 600,
              "note": "tiny checkpoints, tailpod up / benchmark (MTP, K 0-3, c 1-64, 3 reps) / "
                      "report / down; logs, /metrics and results under $OUT"})
lines.append({"call": "optional", "carry": [],
              "command": bench.replace(" all /tmp/tailpod-gpu", " resume /tmp/tailpod-gpu"),
              "timeout_s": 600,
              "note": "only if the sweep stopped at its deadline: up again and finish the same "
                      "run id (the machine must still be the warm one)"})
lines.append({"call": "optional", "carry": [],
              "command": bench.replace(" all /tmp/tailpod-gpu", " draft /tmp/tailpod-gpu"),
              "timeout_s": 600,
              "note": "the draft-model arm (Qwen3 target + draft checkpoint)"})
for line in lines:
    assert len(line["command"]) <= 2000, (line["call"], len(line["command"]))
    print(json.dumps(line))
EOF
}

cmd="${1:-all}"
case "$cmd" in
    download) download ;;
    split) split_parts ;;
    plan) plan ;;
    all)
        download
        split_parts
        plan
        ;;
    *) sed -n '2,35p' "$0" >&2; exit 2 ;;
esac
