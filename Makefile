# The README's commands. Each bootstraps .venv from nothing and is idempotent.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.tether-installed
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20
export JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION := 1

# torch (the [hf] extra's) from PyPI is a CUDA build, about 6 GB of venv; its CPU build is
# about 0.8 GB: `make venv TORCH_INDEX=https://download.pytorch.org/whl/cpu` installs that first.
TORCH_INDEX ?=
TORCH_PIN = $(shell sed -n 's/^ *"\(torch==[^"]*\)",$$/\1/p' pyproject.toml)

.PHONY: venv demo test test-fast lint format bench mutate synth deploy clean

venv: $(STAMP)

# pip leaves what is installed and pinned alone: a rerun after a change to pyproject.toml
# installs only what changed (torch is not downloaded again).
$(STAMP): pyproject.toml agent/pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(if $(TORCH_INDEX),$(PY) -m pip install --quiet '$(TORCH_PIN)' --index-url $(TORCH_INDEX))
	$(PY) -m pip install --quiet -e '.[dev,hf]' -e ./agent
	@touch $@

demo: venv
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

format: venv
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

bench: venv
	@for b in bench/[!_]*.py; do echo "== $$b"; $(PY) $$b $(if $(QUICK),--quick) || exit 1; done

# Mutation testing of the pure rules (functions/domain, the agent's checkpoint and restore
# rules) with their unit tests; not in CI (tens of minutes). Prints survivors and the score;
# fails when a half reaches no mutant (then it measured nothing).
mutate: venv
	$(PY) -m pip install --quiet mutmut==3.8.1
	$(PY) -m tests.mutation

# Synthesize into cdk.out without Docker or the CDK CLI: arm64 Lambda bundle (PyPI once, then
# cached under build/), cdk-nag AwsSolutions and cfn-lint (W3005: CDK's own redundant DependsOn).
synth: venv
	$(PY) -m infra.synth --out cdk.out
	$(VENV)/bin/cfn-lint --ignore-checks W3005 -- cdk.out/Tether.template.json

# Deploy (or update) the stack with `tether deploy`: a pinned CDK CLI through npx, Node.js 22+,
# no prompt (runs without a terminal). ARGS go to it, e.g.
#   make deploy ARGS="--bootstrap --alarm-email you@example.com --region eu-west-1"
deploy: venv
	$(VENV)/bin/tether deploy $(ARGS)

clean:
	rm -rf $(VENV) build cdk.out .pytest_cache .mypy_cache .ruff_cache
