# linkerd-config — every target sets up what it needs (venv, control-plane binaries).
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: help venv binaries test test-unit test-integration lint format demo bench generate \
        dev-cluster-up dev-cluster-down dev-cluster-status clean

help: ## list the targets
	@grep -E '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk -F':.*?## ' '{printf "  %-20s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP) ## create .venv with the package and its dev tools

binaries: $(STAMP) ## find or build etcd, kube-apiserver, KCM, scheduler, kubectl, kwok (cached)
	$(PY) -c 'from linkerd_config.devcluster.binaries import ensure_binaries as e; [print(f"{k}: {v}") for k, v in e().items()]'

test: binaries ## all tests: unit, and integration against the local control plane
	$(PY) -m pytest -ra $(PYTEST_ARGS)

test-unit: $(STAMP) ## unit tests only (no control plane)
	$(PY) -m pytest -ra tests/unit

test-integration: binaries ## integration tests only
	$(PY) -m pytest -ra tests/integration

lint: $(STAMP) ## ruff check + format check, mypy --strict
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

format: $(STAMP) ## apply ruff's fixes and formatting
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

demo: binaries ## the main job on a local control plane (no cluster needed)
	$(PY) -m tests.support.demo

bench: binaries ## benchmarks; results in bench/results/
	PYTHONPATH=. $(PY) bench/control_plane_bench.py
	PYTHONPATH=. $(PY) bench/informer_bench.py
	PYTHONPATH=. $(PY) bench/reconcile_bench.py

generate: $(STAMP) ## regenerate the CRD (and protobuf code) from their sources
	$(PY) -m linkerd_config.linkerd.resource > manifests/crd/linkerdconfigs.yaml
	$(PY) proto/generate.py

dev-cluster-up: binaries ## start the local control plane in the background
	$(PY) -m linkerd_config dev-cluster up

dev-cluster-down: $(STAMP) ## stop it and remove its files
	$(PY) -m linkerd_config dev-cluster down

dev-cluster-status: $(STAMP)
	$(PY) -m linkerd_config dev-cluster status

clean: ## remove the venv and caches in the repo (not the built binaries)
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis *.egg-info
