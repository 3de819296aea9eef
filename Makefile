# Two commands for a fresh machine: `make run` (app on the bundled samples) and `make test`.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PORT ?= 8501

GEN_VENV := .venv-sokoban
GEN_STAMP := $(GEN_VENV)/.installed

TRN_VENV := .venv-trainers
TRN_STAMP := $(TRN_VENV)/.installed

.PHONY: run test lint format install install-dev browser-deps bench bench-quick clean

# The package states lower bounds only (pyproject.toml); constraints.txt pins what this
# environment must hold (torch==2.13.0, pyvis==0.3.2). Every extra: the app, torch, numba, ...
PIP_C := -m pip install -q -c constraints.txt

$(STAMP): constraints.txt requirements-dev.txt pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python $(PIP_C) -r requirements-dev.txt
	$(BIN)/python $(PIP_C) --no-build-isolation -e '.[all]'
	$(BIN)/python -m crbc_viz score sample_rollouts/toy/toy_group.jsonl -e crbc -e graft \
	  --backend numba --out $(VENV)/warmup.parquet  # compiles the numba kernels into their cache
	touch $(STAMP)

install: $(STAMP)

# The Sokoban generator's small environment, so a test can regenerate a task in CI.
$(GEN_STAMP): sample_rollouts/sokoban/requirements.txt
	test -x $(GEN_VENV)/bin/python || $(PY) -m venv $(GEN_VENV)
	$(GEN_VENV)/bin/python -m pip install -q -r sample_rollouts/sokoban/requirements.txt
	touch $(GEN_STAMP)

# The real trainers the integration tests run against (tests/integrations/test_integrations_trainers.py):
# torch==2.13.0 first (never another torch), then TRL + what verl's core_algos/ray_trainer
# import, then verl itself without its (GPU) dependency list, then crbc-viz with its core and the
# torch and numba extras (as a trainer's user installs it; the trainer's torch stays) for its
# entry points.
$(TRN_STAMP): tests/trainer_requirements.txt constraints.txt pyproject.toml
	test -x $(TRN_VENV)/bin/python || $(PY) -m venv $(TRN_VENV)
	$(TRN_VENV)/bin/python $(PIP_C) torch
	$(TRN_VENV)/bin/python $(PIP_C) -r tests/trainer_requirements.txt
	$(TRN_VENV)/bin/python -m pip install -q --no-deps verl==0.9.1
	$(TRN_VENV)/bin/python $(PIP_C) --no-build-isolation -e '.[torch,numba]'
	touch $(TRN_STAMP)

# Debian's chromium for the browser tests (never `playwright install`).
# Debian's chromium (browser tests) and graphviz (`dot`: the graph layout's second opinion on
# the order within its columns; tests/views/test_dot_order.py).
browser-deps:
	@{ command -v chromium >/dev/null 2>&1 && command -v dot >/dev/null 2>&1; } || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium graphviz >/dev/null; \
	  else sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium graphviz >/dev/null; fi; }

run: $(STAMP)
	$(BIN)/streamlit run app.py --server.address 127.0.0.1 --server.port $(PORT) \
	  --server.headless true --browser.gatherUsageStats false

# ruff (pinned in requirements-dev.txt, configured in pyproject.toml): lint + format check.
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

# The suite on TEST_WORKERS processes (pytest-xdist; a file's tests, and the server its fixtures
# start, stay on one worker): most of a browser test's time is waiting on the server and the
# browser, which the other worker fills; a worker that crashes ends the run, never replaced:
# a replaced worker once left the run waiting for tests no worker had. TEST_WORKERS=0: one process.
TEST_WORKERS ?= 2

test: $(STAMP) $(GEN_STAMP) $(TRN_STAMP) browser-deps lint
	CRBC_VIZ_SOKOBAN_PYTHON=$(GEN_VENV)/bin/python CRBC_VIZ_TRAINERS_PYTHON=$(CURDIR)/$(TRN_VENV)/bin/python \
	  $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --max-worker-restart=0

bench: $(STAMP)
	$(BIN)/python -m bench --write

bench-quick: $(STAMP)
	$(BIN)/python -m bench --quick

clean:
	rm -rf $(VENV) $(GEN_VENV) $(TRN_VENV) .pytest_cache test-output
