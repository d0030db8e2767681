# The two commands a newcomer needs: `make demo` and `make test`. Both set up .venv first.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION := 1
export JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION := 1
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20

.PHONY: setup demo test lint typecheck unit synth bench-policy clean

setup: $(STAMP)

$(STAMP): requirements.txt pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -r requirements.txt
	$(BIN)/pip install --quiet --disable-pip-version-check --no-deps -e .
	touch $(STAMP)

demo: setup
	$(BIN)/respot local demo

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-cache

typecheck: setup
	$(BIN)/mypy

unit: setup
	$(BIN)/pytest -q -n auto --dist loadfile --no-loadscope-reorder

# mypy runs beside pytest: its half minute of CPU fits in the suite's waits on simulated
# clocks. Its report (one line when clean) lands among pytest's dots; either failing fails.
test: lint
	$(MAKE) --no-print-directory -j2 typecheck unit

synth: setup
	CDK_OUTDIR=cdk.out $(BIN)/python app.py

clean:
	rm -rf $(VENV) cdk.out .build .pytest_cache .mypy_cache .ruff_cache
