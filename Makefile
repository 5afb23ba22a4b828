# The two commands of the README's quick start:
#   make demo   install into .venv and run the main job on bundled example data
#   make test   install everything (all extras, dev tools) and run ruff, mypy and pytest
# .ci/run is `make test` and nothing else. `make docs` builds the API reference.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Extra pytest arguments, e.g. make test PYTEST_ARGS='-m "not spark"' on a machine without Java.
PYTEST_ARGS ?=

.PHONY: demo test docs java browser clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

demo: $(BIN)/python
	$(BIN)/python -m pip install --quiet --editable .
	$(BIN)/gaussdp release examples/visits.toml --data examples/visits.csv

test: $(BIN)/python java browser
	$(BIN)/python -m pip install --quiet --editable ".[dev,spark,torch,examples,plot,synth,docs]"
	$(BIN)/ruff check src tests benchmarks examples conftest.py
	$(BIN)/ruff format --check src tests benchmarks examples conftest.py
	$(BIN)/mypy
	$(BIN)/pytest -n 2 --durations=15 $(PYTEST_ARGS)

# The documentation site with the API reference, into site/; a warning fails the build.
docs: $(BIN)/python
	$(BIN)/python -m pip install --quiet --editable ".[docs]"
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

# Spark (the `spark` extra, tested in local mode) needs a Java runtime, 17 or newer.
# As root it is installed with apt; otherwise the message says what to do.
java:
	@version=$$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\)[."].*/\1/p' | head -n 1); \
	if [ -n "$$version" ] && [ "$$version" -ge 17 ]; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		apt-get update -qq && apt-get install -y -qq openjdk-17-jre-headless >/dev/null; \
	else \
		echo "Spark's tests need Java 17 or newer; found: $${version:-no java}." >&2; \
		echo "Without root: install a JDK 17+ in your home (e.g. unpack an OpenJDK/Temurin" >&2; \
		echo "build, or 'conda install -c conda-forge openjdk=17'), put its bin/ first on PATH" >&2; \
		echo "and set JAVA_HOME; or skip Spark: make test PYTEST_ARGS='-m \"not spark\"'." >&2; \
		exit 1; \
	fi

# The HTML report's test (tests/audit/test_report.py) drives a headless Chromium through
# Selenium; Debian's chromium and chromium-driver packages need no network at test time.
browser:
	@command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq chromium chromium-driver >/dev/null; }

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis spark-warehouse site
