# kubeopera-tenants: the two commands (README) and their parts.
#   make run   -- the whole pipeline locally on an embedded control plane, with the example Tenant
#   make test  -- lint, type check and the full test suite on real parts, the cluster tier's included
# Both install what they need: a virtualenv in .venv, and the test bed's tools (built from the
# Go module proxy at pinned versions into ~/.cache/kubeopera-tenants, outside the clone).

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
ARGS   ?=

.PHONY: run test test-cluster tools tools-cluster node-packages lint typecheck unit bench clean

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

# The cluster tier (`make run ARGS=--cluster`, `make test-cluster`): a real node with Knative
# Serving, Traefik and Knative Eventing as pods. It needs root, Debian's containerd, runc, CNI
# plugins, iptables and ipset (installed here when missing), and about 20 more minutes of builds, once.
NODE_PACKAGES := containerd runc containernetworking-plugins iptables ipset

node-packages:
	@missing=""; for p in $(NODE_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing$$missing (the cluster tier's node)"; \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $$missing >/dev/null \
	  || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $$missing >/dev/null; }; \
	fi

tools-cluster: $(BIN)/.installed node-packages
	$(BIN)/python -m testbed.toolchain --with-checker --cluster

run: tools $(if $(findstring --cluster,$(ARGS)),tools-cluster)
	$(BIN)/kubeopera-tenants local $(ARGS)

lint: $(BIN)/.installed
	$(BIN)/ruff check shared functions testbed tests bench

typecheck: $(BIN)/.installed
	$(BIN)/mypy

unit: $(BIN)/.installed
	$(BIN)/pytest tests/unit

# The whole suite, lint and type check included, as groups that run side by side (testbed/suite.py:
# the unit and deploy tiers, the integration tier, the end-to-end modules in four groups, the
# cluster tier), each in a private network namespace of its own (tools/isolated): Knative's channel
# dispatcher takes the fixed ports 8080/8443, so two stacks, or a `make run`, never collide.
# ARGS go to the runner (--only GROUP, --jobs N, --no-cluster), the rest of them to every group's
# pytest; SUITE_JOBS (4) is how many groups run at once.
test: tools tools-cluster
	$(BIN)/python -m testbed.suite $(ARGS)

# The cluster tier's tests alone, in a private network namespace too (the node's bridge, address,
# route and iptables rules stay inside it; its cgroups, sysctls and /var paths are put back after).
test-cluster: tools-cluster lint typecheck
	tools/isolated $(BIN)/pytest -m cluster tests/cluster $(ARGS)

bench: tools
	tools/isolated $(BIN)/python -m bench $(ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache *.egg-info
