# Two commands for a fresh machine: `make run` (app on the bundled samples) and `make test`.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PORT ?= 8501

.PHONY: run test install install-dev browser-deps bench bench-quick clean

$(STAMP): requirements.txt requirements-dev.txt pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -r requirements-dev.txt
	$(BIN)/python -m pip install -q --no-deps --no-build-isolation -e .
	touch $(STAMP)

install: $(STAMP)

# Debian's chromium for the browser tests (never `playwright install`).
browser-deps:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; fi; }

run: $(STAMP)
	$(BIN)/streamlit run app.py --server.address 127.0.0.1 --server.port $(PORT) \
	  --server.headless true --browser.gatherUsageStats false

test: $(STAMP) browser-deps
	$(BIN)/python -m pytest

bench: $(STAMP)
	$(BIN)/python -m bench

bench-quick: $(STAMP)
	$(BIN)/python -m bench --quick

clean:
	rm -rf $(VENV) .pytest_cache test-output
