# Targets the README names. Everything runs inside .venv, so a fresh Debian/Ubuntu machine
# needs only python3: `make test` and `make demo` install the rest, system packages included
# (as root; otherwise scripts/setup-system.sh prints what a root user would run).
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
EXTRAS  ?= dev,train,docs
# The install is redone only when pyproject.toml changes: the editable install maps the
# import root to gymhub/, so new modules are seen without reinstalling.
STAMP   := $(VENV)/.installed-$(subst $(comma),-,$(EXTRAS))
comma   := ,
QUIET   := scripts/quietly
export GYMHUB_TEST_POSTGRES_URL ?= postgresql://root@127.0.0.1:5432/test

.PHONY: install system demo test lint typecheck bench docs clean

$(BIN)/python:
	@$(QUIET) "creating $(VENV)" $(PY) -m venv $(VENV)
	@$(QUIET) "upgrading pip" $(BIN)/pip install --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	@$(QUIET) "installing gymhub[$(EXTRAS)] into $(VENV)" $(BIN)/pip install -e ".[$(EXTRAS)]"
	@touch $@

install: $(STAMP)  ## gymhub (editable) with the test tools and the learner (CPU torch)

system:  ## bubblewrap, Podman and the sandbox image (root; idempotent, quiet when done)
	@scripts/setup-system.sh

demo: install  ## the main job: GRPO on sql-v0 over HTTP with SmolLM2-135M (CPU)
	$(BIN)/python -m gymhub.trainer.demo

test: install system  ## the test suite (README's test command)
	$(BIN)/python -m pytest -q

lint: install typecheck  ## ruff + mypy
	$(BIN)/ruff check .

typecheck: install  ## mypy --strict over the import root (gymhub/ links the top-level folders)
	$(BIN)/mypy

bench: install system  ## every benchmark, printing ratios against a baseline run side by side
	@for b in benchmarks/bench_*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

docs: install  ## the documentation site, built strictly into site/ (broken links fail)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

clean:
	rm -rf $(VENV) site build *.egg-info .pytest_cache .mypy_cache .ruff_cache .hypothesis
