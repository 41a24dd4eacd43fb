# Targets the README names. Everything runs inside .venv so a fresh machine needs only python3.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
EXTRAS  ?= dev
export GYMHUB_TEST_POSTGRES_URL ?= postgresql://root@127.0.0.1:5432/test

.PHONY: install test test-all lint typecheck bench clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

install: $(BIN)/python  ## install gymhub (editable, strict mode for type checking) with test tools
	$(BIN)/pip install -q -e ".[$(EXTRAS)]" --config-settings editable_mode=strict

test: install  ## the test suite (README's test command)
	$(BIN)/python -m pytest -q

lint: install  ## ruff + mypy
	$(BIN)/ruff check .
	$(BIN)/mypy -p gymhub

typecheck: install
	$(BIN)/mypy -p gymhub

bench: install  ## every benchmark, printing ratios against a baseline run side by side
	@for b in benchmarks/bench_*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
