# Two commands: `make demo` runs the bundled examples, `make test` runs the tests.
# Both create .venv with Python 3.11+ and install what they need.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Every agent, hub and pytest worker imports the project again: let Python keep the bytecode it compiles.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: demo test lint bench clean system-packages

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "SpanEdge needs Python 3.11+; run make PYTHON=python3.11 ..."'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[all,dev]'
	@touch $(STAMP)

demo: $(STAMP)
	$(BIN)/spanedge deploy examples/cold_chain/app.py --sites examples/cold_chain/sites.yaml --dry-run --compare central,local-first
	$(BIN)/spanedge simulate examples/cold_chain/sites.yaml examples/cold_chain/app.py --duration 60
	$(BIN)/spanedge deploy examples/smart_farm/app.py --sites examples/smart_farm/sites.yaml --dry-run --compare central,local-first
	$(BIN)/spanedge simulate examples/smart_farm/sites.yaml examples/smart_farm/app.py --duration 80 --fault latency:barn:300@20s

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

system-packages:
	@scripts/system-packages

# The unit tests (no broker, no Spark) on both cores; then the rest, two files at a time (each worker
# keeps a file's tests together, so a module's simulated run or broker starts once, and has its own SparkSession).
test: $(STAMP) lint system-packages
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet
	$(BIN)/pytest tests/unit -n 2
	$(BIN)/pytest tests/integration tests/e2e tests/docs -n 2 --dist loadfile

bench: $(STAMP)
	$(BIN)/python bench/placement.py

clean:
	rm -rf $(VENV) .spanedge .pytest_cache .mypy_cache .ruff_cache build
