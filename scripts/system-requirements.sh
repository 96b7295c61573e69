#!/bin/sh
# What `make demo` and `make test` need from the system, checked before anything is downloaded:
# Python 3.10+ with its venv module (the two virtual environments), and OpenSSH's server and
# ssh-keygen (a real sshd plays each pod's SSH server in the demo and in the SSH tests; tailpod
# runs /usr/sbin/sshd, tailpod/sandbox/sshd.py). For `test` also HAProxy (the lane tests put a
# real one in front of two engines, tailpod/pods/lanes.py) and Chromium (the HTML report tests
# open each page in a headless browser, tests/integration/browser/).
#
# Usage: system-requirements.sh demo|test
#   As root with apt-get (Debian, Ubuntu): installs what is missing.
#   Otherwise: names what is missing and the command that installs it, and exits 1, so that make
#   stops before its first download. For `test` a missing sshd, haproxy or chromium is only a note
#   (the SSH, lane or browser tests skip).
# SSHD, HAPROXY and CHROMIUM override the servers' paths (tests use them to stand for a machine without one).
set -eu

goal=${1:-demo}
PYTHON=${PYTHON:-python3}
SSHD=${SSHD:-/usr/sbin/sshd}
HAPROXY=${HAPROXY:-$(command -v haproxy 2>/dev/null || echo /usr/sbin/haproxy)}
CHROMIUM=${CHROMIUM:-$(command -v chromium 2>/dev/null || echo /usr/bin/chromium)}

if ! command -v "$PYTHON" >/dev/null 2>&1; then
  echo "error: $PYTHON not found; tailpod needs Python 3.10 or newer (make $goal PYTHON=...)" >&2
  exit 1
fi
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))'; then
  echo "error: $("$PYTHON" --version 2>&1) is too old; tailpod needs 3.10 or newer" \
       "(make $goal PYTHON=python3.11)" >&2
  exit 1
fi

packages=""
needs=""
if ! "$PYTHON" -c 'import ensurepip, venv' >/dev/null 2>&1; then
  packages="$packages python3-venv"
  needs="$needs
  - Python's venv module (make builds .venv and .venv-engine with it)"
fi
sshd_missing=no
if [ ! -x "$SSHD" ] || ! command -v ssh-keygen >/dev/null 2>&1; then
  sshd_missing=yes
  packages="$packages openssh-server"
  needs="$needs
  - OpenSSH's server at $SSHD and ssh-keygen (the demo's pods are real SSH servers on this machine)"
fi
haproxy_missing=no
if [ "$goal" = test ] && [ ! -x "$HAPROXY" ]; then
  haproxy_missing=yes
  packages="$packages haproxy"
  needs="$needs
  - HAProxy at $HAPROXY (the lane tests run a real one in front of two engines)"
fi
chromium_missing=no
if [ "$goal" = test ] && [ ! -x "$CHROMIUM" ]; then
  chromium_missing=yes
  packages="$packages chromium"
  needs="$needs
  - Chromium at $CHROMIUM (the HTML report tests open each page in a headless browser)"
fi
[ -z "$packages" ] && exit 0

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "make $goal: installing$packages (apt-get)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $packages >/dev/null
  if [ ! -x "$SSHD" ] && [ "$sshd_missing" = yes ]; then
    echo "error: apt-get installed openssh-server but $SSHD is still missing" >&2
    exit 1
  fi
  if [ "$haproxy_missing" = yes ] && [ ! -x "$HAPROXY" ] && ! command -v haproxy >/dev/null 2>&1
  then
    echo "error: apt-get installed haproxy but $HAPROXY is still missing" >&2
    exit 1
  fi
  if [ "$chromium_missing" = yes ] && [ ! -x "$CHROMIUM" ] && ! command -v chromium >/dev/null 2>&1
  then
    echo "error: apt-get installed chromium but $CHROMIUM is still missing" >&2
    exit 1
  fi
  exit 0
fi

if [ "$goal" = test ]; then
  case "$packages" in
    *python3-venv*) ;;  # the one thing `make test` cannot do without
    *)
      if [ "$sshd_missing" = yes ]; then
        echo "note: OpenSSH's server is not installed and this is not root: the SSH tests will" \
             "skip (install it with: sudo apt-get install openssh-server)"
      fi
      if [ "$haproxy_missing" = yes ]; then
        echo "note: HAProxy is not installed and this is not root: the lane tests will skip" \
             "(install it with: sudo apt-get install haproxy)"
      fi
      if [ "$chromium_missing" = yes ]; then
        echo "note: Chromium is not installed and this is not root: the browser tests of the" \
             "HTML report will skip (install it with: sudo apt-get install chromium)"
      fi
      exit 0 ;;
  esac
fi

cat >&2 <<MSG
error: make $goal needs, before it downloads anything:$needs
Install it, then run make $goal again:
  sudo apt-get install$packages      (Debian, Ubuntu)
  sudo dnf install openssh-server      (Fedora; its Python has venv)
Run as root, make $goal installs it itself (apt-get).
MSG
exit 1
