#!/usr/bin/env bash
# haproxy for the device machine: the `deploy-lanes` arm of `gpu_vllm.sh deploy` puts both lanes
# behind HAProxy (tailpod/pods/lanes.py finds `haproxy` on PATH), and the device image is not known
# to have it; nothing can be installed there (nothing outside the machine can be reached).
#
#   benchmarks/gpu_haproxy_carry.sh [DEST]        DEST default .whl/haproxy (ignored by git)
#
# Copies this machine's haproxy binary as DEST/haproxy.bin with every shared library it loads
# except glibc's own (libc, libm, libpthread, libdl, librt, the loader: the device's newer glibc
# runs a binary linked against an older one) into DEST/lib, and writes DEST/haproxy, a wrapper that
# runs it with DEST/lib first on LD_LIBRARY_PATH. Then `haproxy -v` through the wrapper, here.
# On the device: carry DEST (run's `carry`), then `HAPROXY_DIR=$PWD/.whl/haproxy gpu_vllm.sh
# deploy ...`; check `$HAPROXY_DIR/haproxy -v` in the first call (built on Debian 12, not yet run
# on the device's image: unverified there).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
dest="${1:-$(dirname "$here")/.whl/haproxy}"
bin="$(command -v haproxy || true)"
[ -n "$bin" ] || for p in /usr/sbin/haproxy /usr/local/sbin/haproxy; do [ -x "$p" ] && bin="$p"; done
[ -n "$bin" ] || { echo "no haproxy on this machine: apt-get install -y haproxy first" >&2; exit 2; }
rm -rf "$dest"
mkdir -p "$dest/lib"
cp -L "$bin" "$dest/haproxy.bin"
ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | while read -r lib; do
    case "$(basename "$lib")" in
        libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*|ld-linux*) continue ;;
    esac
    cp -L "$lib" "$dest/lib/"
done
cat > "$dest/haproxy" <<'WRAP'
#!/bin/sh
here="$(dirname "$(readlink -f "$0")")"
LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$here/haproxy.bin" "$@"
WRAP
chmod +x "$dest/haproxy" "$dest/haproxy.bin"
"$dest/haproxy" -v | head -1
echo "$dest: $(du -sh "$dest" | cut -f1), $(find "$dest/lib" -type f | wc -l) libraries" >&2
