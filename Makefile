# kubeopera-tenants: the two commands (README) and their parts.
#   make run   -- the whole pipeline locally on an embedded control plane, with the example Tenant
#   make test  -- lint, type check and the full test suite on real parts
# Both install what they need: a virtualenv in .venv, and the test bed's tools (built from the
# Go module proxy at pinned versions into ~/.cache/kubeopera-tenants, outside the clone).

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
ARGS   ?=

.PHONY: run test tools lint typecheck unit bench clean

# The development install: the runtime (pyproject.toml: shared/, functions/, the operator's
# `kubeopera-tenants status|retry`) with the test tools, then the test bed (testbed/pyproject.toml),
# which adds `kubeopera-tenants local`. Both editable, so the clone is what runs.
$(BIN)/.installed: pyproject.toml testbed/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check --upgrade pip
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[test]'
	$(BIN)/pip install --quiet --disable-pip-version-check --no-build-isolation -e ./testbed
	touch $@

tools: $(BIN)/.installed
	$(BIN)/python -m testbed.toolchain --with-checker

run: tools
	$(BIN)/kubeopera-tenants local $(ARGS)

lint: $(BIN)/.installed
	$(BIN)/ruff check shared functions testbed tests bench

typecheck: $(BIN)/.installed
	$(BIN)/mypy

unit: $(BIN)/.installed
	$(BIN)/pytest tests/unit

# The suite runs in a private network namespace where one can be made (tools/isolated): Knative's
# channel dispatcher takes the fixed ports 8080/8443, so a `make run` may stay up meanwhile.
test: tools lint typecheck
	tools/isolated $(BIN)/pytest $(ARGS)

bench: tools
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache *.egg-info
