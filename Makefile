# Two commands do all the set-up on a machine with only python3 and make:
#   make demo   install steplog alone, seed the embedded SQLite store and open the UI
#   make test   add the dev tools, then lint, type-check and run the whole test suite
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEV_STAMP := $(VENV)/.installed-dev

.PHONY: demo test lint typecheck pytest bench corpus clean

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit("steplog needs Python >= 3.11, found " + sys.version.split()[0]) if sys.version_info < (3, 11) else None'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e .
	@touch $(STAMP)

$(DEV_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[dev,bench]'
	@touch $(DEV_STAMP)

demo: $(STAMP)
	$(BIN)/steplog demo

test: lint typecheck pytest

lint: $(DEV_STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

# ui/ is the package steplog.ui, beside core/ (steplog): mypy sees both under their import names
# through a tree of links (.mypy-path/steplog), rebuilt each time so new modules are in it.
typecheck: $(DEV_STAMP)
	$(BIN)/mypy core
	@rm -rf .mypy-path && mkdir -p .mypy-path/steplog
	@for entry in core/*; do ln -s "../../$$entry" .mypy-path/steplog/; done
	@ln -s ../../ui .mypy-path/steplog/ui
	MYPYPATH=.mypy-path $(BIN)/mypy -p steplog.ui

pytest: $(DEV_STAMP)
	$(BIN)/pytest -n 2 --dist loadgroup

bench: $(DEV_STAMP)
	$(BIN)/steplog bench append

# Record the conformance corpus again (tests/corpus/README.md): one venv per framework, from PyPI.
corpus: $(STAMP)
	$(BIN)/python -m tests.corpus.regenerate

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
