# Targets the README names. Everything runs inside .venv so a fresh machine needs only python3.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
EXTRAS  ?= dev,train
export GYMHUB_TEST_POSTGRES_URL ?= postgresql://root@127.0.0.1:5432/test

.PHONY: install demo test lint typecheck bench clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

install: $(BIN)/python  ## install gymhub (editable) with the test tools and the learner (CPU torch)
	$(BIN)/pip install -q -e ".[$(EXTRAS)]"

demo: install  ## the main job: GRPO on sql-v0 over HTTP with SmolLM2-135M (CPU)
	$(BIN)/python -m gymhub.trainer.demo

test: install  ## the test suite (README's test command)
	$(BIN)/python -m pytest -q

lint: install typecheck  ## ruff + mypy
	$(BIN)/ruff check .

# mypy needs the import root as one tree: build/typecheck/gymhub links the mapped
# top-level folders (envs/ -> gymhub/envs ...), so new files are seen without reinstalling.
typecheck: install
	rm -rf build/typecheck && mkdir -p build/typecheck/gymhub
	for f in gymhub/*; do ln -s "$(CURDIR)/$$f" build/typecheck/gymhub/; done
	for d in envs verifiers sandbox server trainer hub; do ln -s "$(CURDIR)/$$d" build/typecheck/gymhub/$$d; done
	cd build/typecheck && $(CURDIR)/$(BIN)/mypy --config-file $(CURDIR)/pyproject.toml -p gymhub

bench: install  ## every benchmark, printing ratios against a baseline run side by side
	@for b in benchmarks/bench_*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
