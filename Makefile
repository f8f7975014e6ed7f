# Two commands do all set-up on a fresh machine:
#   make run    bench run --method opd-multi --suite math_code on the tiny CPU profile
#   make test   the test suite (installs Debian's chromium for the browser tests if missing)
VENV ?= .venv
BIN := $(VENV)/bin
export OMP_WAIT_POLICY ?= PASSIVE

.PHONY: setup run test bench browser

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0   # the local CPU build first: a bare `torch` pulls CUDA
	$(BIN)/pip install -q -e ".[dev]" --config-settings editable_mode=compat
	touch $@

setup: $(VENV)/.installed

run: setup
	$(BIN)/bench run --method opd-multi --suite math_code

browser:
	@command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium >/dev/null)

test: setup browser
	$(BIN)/pytest -q

bench: setup
	$(BIN)/python benchmarks/bench_rollout.py
