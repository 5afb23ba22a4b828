# The two commands of the README's quick start:
#   make demo   install into .venv and run the main job on bundled example data
#   make test   install everything (all extras, dev tools) and run ruff, mypy and pytest
# .ci/run is `make test` and nothing else.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test java clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

demo: $(BIN)/python
	$(BIN)/python -m pip install --quiet --editable .
	$(BIN)/gaussdp release examples/visits.toml --data examples/visits.csv

test: $(BIN)/python java
	$(BIN)/python -m pip install --quiet --editable ".[dev,spark,torch,examples,synth]"
	$(BIN)/ruff check src tests benchmarks examples conftest.py
	$(BIN)/ruff format --check src tests benchmarks examples conftest.py
	$(BIN)/mypy
	$(BIN)/pytest

# Spark (the `spark` extra, tested in local mode) needs a Java runtime, 17 or newer.
java:
	@command -v java >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq openjdk-17-jre-headless >/dev/null; }

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
