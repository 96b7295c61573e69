#!/bin/sh
# What `make demo` and `make test` need from the system, checked before anything is downloaded:
# Python 3.10+ with its venv module (the two virtual environments), and OpenSSH's server and
# ssh-keygen (a real sshd plays each pod's SSH server in the demo and in the SSH tests; tailpod
# runs /usr/sbin/sshd, tailpod/sandbox/sshd.py).
#
# Usage: system-requirements.sh demo|test
#   As root with apt-get (Debian, Ubuntu): installs what is missing.
#   Otherwise: names what is missing and the command that installs it, and exits 1, so that make
#   stops before its first download. For `test` a missing sshd is only a note (the SSH tests skip).
# SSHD overrides the server's path (tests use it to stand for a machine without one).
set -eu

goal=${1:-demo}
PYTHON=${PYTHON:-python3}
SSHD=${SSHD:-/usr/sbin/sshd}

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
[ -z "$packages" ] && exit 0

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "make $goal: installing$packages (apt-get)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $packages >/dev/null
  if [ ! -x "$SSHD" ] && [ "$sshd_missing" = yes ]; then
    echo "error: apt-get installed openssh-server but $SSHD is still missing" >&2
    exit 1
  fi
  exit 0
fi

if [ "$goal" = test ] && [ "$packages" = " openssh-server" ]; then
  echo "note: OpenSSH's server is not installed and this is not root: the SSH tests will skip" \
       "(install it with: sudo apt-get install openssh-server)"
  exit 0
fi

cat >&2 <<MSG
error: make $goal needs, before it downloads anything:$needs
Install it, then run make $goal again:
  sudo apt-get install$packages      (Debian, Ubuntu)
  sudo dnf install openssh-server      (Fedora; its Python has venv)
Run as root, make $goal installs it itself (apt-get).
MSG
exit 1
