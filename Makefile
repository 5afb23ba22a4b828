# The two commands of the README's quick start:
#   make demo   install into .venv and run the main job on bundled example data
#   make test   install everything (all extras, dev tools) and run ruff, mypy and pytest
# .ci/run is `make test` and nothing else.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

demo: $(BIN)/python
	$(BIN)/python -m pip install --quiet --editable .
	$(BIN)/gaussdp calibrate --epsilon 1 --delta 1e-6
	$(BIN)/gaussdp convert --mu 1 --delta 1e-5

test: $(BIN)/python
	$(BIN)/python -m pip install --quiet --editable ".[dev]"
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/mypy
	$(BIN)/pytest

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
