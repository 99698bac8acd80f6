# linkerd-config — every target sets up what it needs (venv, control-plane binaries).
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

# Linkerd's source releases (for its real proxy injector and CLI): the copies beside the
# repository when present, else each release tag is cloned from Linkerd's repository.
LINKERD2_SOURCE ?= $(abspath $(wildcard ../shared/vendor/linkerd2))
export LINKERD2_SOURCE
# Linkerd's data plane (proxy, proxy-init, proxy-identity, policy controller): the pinned sources
# and the binaries built from them beside the repository, checked against their sums.
LINKERD_DATAPLANE_SOURCE ?= $(abspath $(wildcard ../shared/vendor/linkerd2-dataplane))
export LINKERD_DATAPLANE_SOURCE

.PHONY: docker-build docker-build-local docker-push render deploy undeploy helm-deploy helm-undeploy
.PHONY: help venv lock binaries test test-unit test-durations test-integration property lint format demo bench generate \
        dev-cluster-up dev-cluster-down dev-cluster-status clean install uninstall run bench-scale \
        controller kind-cluster cert-manager emojivoto

help: ## list the targets
	@grep -E '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk -F':.*?## ' '{printf "  %-20s %s\n", $$1, $$2}'

# Dependencies from the lock file (pinned, hash-checked), then the project itself without
# resolving anything: every machine gets the same versions. `make lock` refreshes the locks.
$(STAMP): pyproject.toml requirements/dev.lock
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet --require-hashes -r requirements/dev.lock
	$(VENV)/bin/pip install --quiet --no-deps -e .
	touch $(STAMP)

LOCK_ARGS := --quiet --generate-hashes --strip-extras --allow-unsafe --no-emit-find-links
lock: $(STAMP) ## re-resolve requirements/*.lock from pyproject.toml's bounds
	cd requirements && ../$(VENV)/bin/pip-compile $(LOCK_ARGS) --output-file runtime.lock ../pyproject.toml
	cd requirements && ../$(VENV)/bin/pip-compile $(LOCK_ARGS) --extra dev --output-file dev.lock ../pyproject.toml
	cd requirements && ../$(VENV)/bin/pip-compile $(LOCK_ARGS) --extra dev --extra bench --output-file bench.lock ../pyproject.toml

venv: $(STAMP) ## create .venv with the package and its dev tools

binaries: $(STAMP) ## find or build the control plane and Linkerd's injector + CLI (cached)
	$(PY) -m devcluster.ensure

SHARDS ?= $(shell nproc 2>/dev/null || echo 1)
UNIT_SHARDS ?= $(SHARDS)
# Two per CPU: the integration tests mostly wait on their clusters (one process per CPU left the
# CPUs about 60% idle; two each, about 35%, each test's seconds up 7%).
TEST_SHARDS ?= $(shell echo $$(( 2 * $(SHARDS) )))
RESULTS := .test-results
# $(call shards,N,NAME,PATHS): N pytest processes at once (TEST_SHARD=i/N, tests/conftest.py's
# shard), each its share of PATHS; each one's log and JUnit XML in $(RESULTS)/NAME-i.*
# (`tail -f` them to follow), its last line printed, or its whole log if it failed.
define shards
mkdir -p $(RESULTS); shards=$$(seq 0 $$(($(1) - 1))); \
	for i in $$shards; do \
	  (TEST_SHARD=$$i/$(1) $(PY) -m pytest -ra -q -o cache_dir=.pytest_cache/$(2)-$$i \
	    --junitxml=$(RESULTS)/$(2)-$$i.xml $(PYTEST_ARGS) $(3) > $(RESULTS)/$(2)-$$i.log 2>&1; \
	    echo $$? > $(RESULTS)/$(2)-$$i.rc) & \
	done; wait; status=0; \
	for i in $$shards; do \
	  echo "== $(2), shard $$i of $(1)"; \
	  if [ "$$(cat $(RESULTS)/$(2)-$$i.rc)" = 0 ]; then tail -n 1 $(RESULTS)/$(2)-$$i.log; \
	  else cat $(RESULTS)/$(2)-$$i.log; status=1; fi; \
	done; exit $$status
endef

test: binaries ## all tests, unit and integration (against local control planes), in TEST_SHARDS processes
	@$(call shards,$(TEST_SHARDS),test,)

test-unit: $(STAMP) ## unit tests only (no control plane), one process per CPU (UNIT_SHARDS)
	@$(call shards,$(UNIT_SHARDS),unit,tests/unit)

test-durations: ## after a full `make test`: each integration test's seconds into tests/durations.json (what the shards balance)
	$(PY) -m tests.support.durations $(RESULTS)/test-*.xml

test-integration: binaries ## integration tests only
	$(PY) -m pytest -ra tests/integration

PROPERTY_EXAMPLES ?= 20000
property: $(STAMP) ## the rollout's and the trust-anchor guard's safety invariants, a long randomized search (PROPERTY_EXAMPLES; make test runs a short derandomized one)
	ROLLOUT_PROPERTY_EXAMPLES=$(PROPERTY_EXAMPLES) $(PY) -m pytest -ra -p no:cacheprovider \
		tests/unit/rollout/test_rollout_invariants.py tests/unit/trust/test_trust_anchor_guard_properties.py

lint: $(STAMP) ## ruff check + format check, mypy --strict, import-linter's layer contracts
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

format: $(STAMP) ## apply ruff's fixes and formatting
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

demo: binaries ## the main job on a local control plane (no cluster needed)
	$(PY) -m tests.support.demo

# kopf is the scale bench's peer only: installed (pinned, hashed) by the bench, not the venv.
BENCH_STAMP := $(VENV)/.bench-installed
$(BENCH_STAMP): $(STAMP) requirements/bench.lock
	$(VENV)/bin/pip install --quiet --require-hashes -r requirements/bench.lock
	touch $(BENCH_STAMP)

SCALE_ARGS ?=
bench: binaries $(BENCH_STAMP) ## benchmarks (a few minutes); results and bench/RESULTS.md
	PYTHONPATH=. $(PY) bench/control_plane_bench.py
	PYTHONPATH=. $(PY) bench/informer_bench.py
	PYTHONPATH=. $(PY) bench/reconcile_bench.py
	PYTHONPATH=. $(PY) bench/decision_bench.py
	PYTHONPATH=. $(PY) bench/hostile_input_bench.py
	PYTHONPATH=. $(PY) bench/webhook_flood_bench.py
	PYTHONPATH=. $(PY) bench/fairness_bench.py
	PYTHONPATH=. $(PY) bench/scale_bench.py $(SCALE_ARGS)
	PYTHONPATH=. $(PY) bench/results_tables.py

bench-scale: binaries $(BENCH_STAMP) ## the scale bench alone (tables in bench/RESULTS.md): SCALE_ARGS='--pods 1000,10000,50000 --deployments 1000 ...'
	PYTHONPATH=. $(PY) bench/scale_bench.py $(SCALE_ARGS)
	PYTHONPATH=. $(PY) bench/results_tables.py

generate: $(STAMP) ## regenerate the CRD, webhook configurations (kustomize + chart, with the alert rules), protobuf code and the docs' field table
	$(PY) -m linkerd_config.linkerd.spec.crd > manifests/crd/linkerdconfigs.yaml.tmp
	mv manifests/crd/linkerdconfigs.yaml.tmp manifests/crd/linkerdconfigs.yaml
	$(PY) -m linkerd_config.linkerd.spec.crd --local > manifests/crd-local/linkerdconfigs.yaml.tmp
	mv manifests/crd-local/linkerdconfigs.yaml.tmp manifests/crd-local/linkerdconfigs.yaml
	$(PY) -m linkerd_config.linkerd.admission.webhooks > manifests/webhook/webhooks.yaml.tmp
	mv manifests/webhook/webhooks.yaml.tmp manifests/webhook/webhooks.yaml
	cp manifests/crd-local/linkerdconfigs.yaml manifests/chart/files/linkerdconfigs-local.yaml
	cp manifests/crd/linkerdconfigs.yaml manifests/webhook/webhooks.yaml \
	   manifests/components/alerts/prometheus_rule.yaml manifests/chart/files/
	$(PY) proto/generate.py
	$(PY) manifests/components/argocd-health/argocd_cm.py
	$(PY) -c 'from linkerd_config.linkerd.formats.field_table import write_docs_table as w; w("docs/user-guide.md")'
	{ echo "# The seed sample (../edge_19.12.3.yaml) as v1alpha2, written by make generate with"; \
	  echo "# linkerd-config convert. For a cluster with the webhooks off, which stores only v1alpha2."; \
	  $(PY) -m linkerd_config convert -f manifests/samples/edge_19.12.3.yaml; } > manifests/samples/v1alpha2/edge_19.12.3.yaml.tmp
	mv manifests/samples/v1alpha2/edge_19.12.3.yaml.tmp manifests/samples/v1alpha2/edge_19.12.3.yaml

DEV_CLUSTER_ARGS ?=
dev-cluster-up: binaries ## start the local control plane in the background; DEV_CLUSTER_ARGS='--real-node --with=cert-manager ...'
	$(PY) -m devcluster up $(DEV_CLUSTER_ARGS)

dev-cluster-down: $(STAMP) ## stop it and remove its files
	$(PY) -m devcluster down

dev-cluster-status: $(STAMP) ## print the local control plane's state (server, kubeconfig, pids)
	$(PY) -m devcluster status

# ---- for people with a real cluster (current kubeconfig) ----------------------------------
KUBECTL ?= kubectl
KIND ?= kind
IMG ?= linkerd-config:latest
OVERLAY ?= default
KIND_CLUSTER ?= linkerd-config
# As pinned.CERT_MANAGER, the cert-manager the local control plane runs.
CERT_MANAGER_VERSION ?= v1.21.2
# $(call need,tool,what for): a clear message instead of an obscure failure.
need = @command -v $(1) >/dev/null 2>&1 || { echo "make $@: needs '$(1)' ($(2)); not found on PATH." >&2; exit 1; }

CRD_NAME := linkerdconfigs.config.linkerd.io
LOCAL_CONVERTER := https://127.0.0.1:9443/convert-config-linkerd-io-linkerdconfig
SERVICE_CONVERTER := {"service":{"namespace":"linkerd","name":"linkerd-config-webhook","path":"/convert-config-linkerd-io-linkerdconfig","port":443}}
# $(call set_converter,CLIENTCONFIG): the installed CRD's converter replaced (a JSON object).
set_converter = $(KUBECTL) patch crd $(CRD_NAME) --type=json \
  -p '[{"op":"replace","path":"/spec/conversion/webhook/clientConfig","value":$(1)}]'

# The CRD for a local run: its conversion webhook is the controller `make run` starts (which
# registers itself); `make deploy` and the chart install the in-cluster one over it, and
# `make install` after `make undeploy` brings it back. Nothing stored changes either way.
install: ## install the CRD for a local run (conversion served by `make run`) into the current cluster
	$(call need,$(KUBECTL),to talk to your cluster)
	@# After the chart (no last-applied for kubectl's merge) the Service would stay beside the URL.
	@if [ -n "$$($(KUBECTL) get crd $(CRD_NAME) --ignore-not-found \
	        -o jsonpath='{.spec.conversion.webhook.clientConfig.service.name}')" ]; then \
	  echo "make install: the CRD's converter is the in-cluster webhook; pointing it at a local run (every LinkerdConfig kept)"; \
	  $(call set_converter,{"url":"$(LOCAL_CONVERTER)"}); \
	fi
	$(KUBECTL) apply -k manifests/crd-local
	@# Established: the API server serves it (kubectl wait fails on a CRD with no conditions yet).
	@for i in $$(seq 60); do \
	  [ "$$($(KUBECTL) get crd linkerdconfigs.config.linkerd.io \
	        -o jsonpath='{.status.conditions[?(@.type=="Established")].status}')" = True ] && exit 0; \
	  sleep 1; \
	done; echo "make install: the CRD was not established within 60 s" >&2; exit 1

uninstall: ## remove the CRD (and every LinkerdConfig) from the current cluster
	$(call need,$(KUBECTL),to talk to your cluster)
	$(KUBECTL) delete -k manifests/crd-local

run: $(STAMP) ## run the controller locally against the current kubeconfig (ENABLE_WEBHOOKS=false: it serves only the CRD's conversion)
	$(PY) -m linkerd_config run

# The image tool (kubebuilder's name). Empty: docker when its engine answers, else podman.
# PYTHON_IMAGE: another base than the Dockerfile's python:3.11.13-slim-bookworm.
# podman as root where limits cannot be raised (a Firecracker VM) gets a containers.conf from
# the cache folder unless CONTAINERS_CONF is set: see devcluster/container_image.py.
CONTAINER_TOOL ?=
PYTHON_IMAGE ?=
CONTAINER_IMAGE = $(PY) -m devcluster.container_image --tool '$(CONTAINER_TOOL)'

docker-build: $(STAMP) ## build the controller image IMG (default linkerd-config:latest) with CONTAINER_TOOL
	$(CONTAINER_IMAGE) build '$(IMG)' $(if $(PYTHON_IMAGE),--python-image '$(PYTHON_IMAGE)')

# No registry reachable: the base made from Debian's packages (python3 3.11), once per machine.
docker-build-local: $(STAMP) ## docker-build on a base made with mmdebstrap from Debian bookworm (no registry needed; cached)
	base=$$($(CONTAINER_IMAGE) base) && \
	$(CONTAINER_IMAGE) build '$(IMG)' --python-image "$$base"

docker-push: $(STAMP) ## push IMG to its registry with CONTAINER_TOOL
	$(CONTAINER_IMAGE) push '$(IMG)'

# IMG as kustomize's images entry (name, name:tag or name@sha256:digest; a registry port is
# fine), in a throw-away overlay beside the others (kustomize refuses absolute bases).
render: ## print manifests/$(OVERLAY) with the controller image set to IMG (kubectl's kustomize)
	$(call need,$(KUBECTL),for its built-in kustomize)
	@tmp=$$(mktemp -d manifests/.render.XXXXXX) && trap 'rm -rf "$$tmp"' EXIT && \
	img='$(IMG)' && last="$${img##*/}" && \
	case "$$img" in \
	  *@*) entry="    newName: \"$${img%@*}\"\n    digest: \"$${img#*@}\"" ;; \
	  *) case "$$last" in \
	       *:*) entry="    newName: \"$${img%:*}\"\n    newTag: \"$${last##*:}\"" ;; \
	       *) entry="    newName: \"$$img\"" ;; \
	     esac ;; \
	esac && \
	printf 'apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - ../%s\nimages:\n  - name: linkerd-config\n%b\n' \
	  '$(OVERLAY)' "$$entry" > "$$tmp/kustomization.yaml" && \
	$(KUBECTL) kustomize "$$tmp"

deploy: ## install manifests/$(OVERLAY) with image IMG into the current cluster (namespace linkerd created if absent)
	$(call need,$(KUBECTL),to talk to your cluster)
	$(KUBECTL) create namespace linkerd --dry-run=client -o yaml | $(KUBECTL) apply -f -
	$(MAKE) --no-print-directory render | $(KUBECTL) apply -f -

# The CRD stays, as with helm-undeploy: deleting it would delete every LinkerdConfig
# (`make uninstall` removes it on purpose). kubectl kustomize separates documents by "---".
# With a cert-manager Certificate, its Secret goes too: cert-manager keeps it by default, and
# a later `make helm-deploy` could not own it (with own-certs the Secret is yours: kept).
undeploy: ## remove what deploy installed, except the CRD (your LinkerdConfigs) and the namespace
	$(call need,$(KUBECTL),to talk to your cluster)
	@rendered="$$($(MAKE) --no-print-directory render)" && \
	printf '%s\n' "$$rendered" \
	  | awk 'BEGIN { RS = "\n---\n"; ORS = "\n---\n" } !/(^|\n)kind: CustomResourceDefinition\n/' \
	  | $(KUBECTL) delete --ignore-not-found -f - && \
	if printf '%s\n' "$$rendered" | grep -q '^kind: Certificate$$'; then \
	  $(KUBECTL) -n linkerd delete secret linkerd-config-webhook-cert --ignore-not-found; \
	fi

# The chart (manifests/chart) with the pinned helm (built on first use, like the control plane).
HELM = $(PY) -m devcluster.helm_cli
helm-deploy: $(STAMP) ## helm upgrade --install the chart with image IMG (name:tag) into namespace linkerd; HELM_ARGS for more
	@img='$(IMG)' && last="$${img##*/}" && \
	case "$$img" in *@*) echo "make $@: IMG must be name:tag for the chart (controllerImage, controllerImageVersion)" >&2; exit 1 ;; esac && \
	case "$$last" in *:*) repo="$${img%:*}"; tag="$${last##*:}" ;; *) repo="$$img"; tag=latest ;; esac && \
	$(MAKE) --no-print-directory helm-takeover && \
	$(HELM) upgrade --install linkerd-config manifests/chart --namespace linkerd --create-namespace \
	  --set controllerImage="$$repo" --set controllerImageVersion="$$tag" $(HELM_ARGS)

# A CRD installed otherwise (`make install`, `make deploy`, or kept by a `helm uninstall`):
# handed to the release rather than refused by Helm ("invalid ownership metadata"), and its
# converter set first to the form the chart renders (Helm's patch would keep an old url beside
# a new service, which the API server refuses). Idempotent; nothing stored changes. Nothing
# is done where the chart renders no CRD (installCRDs=false: the CRD is yours).
.PHONY: helm-takeover
helm-takeover:
	@live="$$($(KUBECTL) get crd $(CRD_NAME) --ignore-not-found \
	    -o jsonpath='{.metadata.name} {.spec.conversion.webhook.clientConfig.url}' 2>/dev/null)"; \
	[ -n "$$live" ] || exit 0; \
	rendered="$$($(HELM) template linkerd-config manifests/chart --namespace linkerd $(HELM_ARGS) \
	    --show-only templates/crd.yaml 2>/dev/null)"; \
	[ -n "$$rendered" ] || exit 0; \
	$(KUBECTL) label crd $(CRD_NAME) app.kubernetes.io/managed-by=Helm --overwrite >/dev/null && \
	$(KUBECTL) annotate crd $(CRD_NAME) meta.helm.sh/release-name=linkerd-config \
	  meta.helm.sh/release-namespace=linkerd --overwrite >/dev/null || exit 1; \
	if printf '%s\n' "$$rendered" | grep -q '^ *service:$$'; then \
	  case "$$live" in *" https://"*) \
	    echo "make helm-deploy: the CRD's converter becomes the release's webhook Service (every LinkerdConfig kept)"; \
	    $(call set_converter,$(SERVICE_CONVERTER));; esac; \
	else \
	  case "$$live" in *" https://"*) ;; *) \
	    echo "make helm-deploy: the CRD's converter becomes a local run's (every LinkerdConfig kept)"; \
	    $(call set_converter,{"url":"$(LOCAL_CONVERTER)"});; esac; \
	fi

helm-undeploy: $(STAMP) ## helm uninstall the chart (the CRD and your LinkerdConfigs are kept)
	$(HELM) uninstall linkerd-config --namespace linkerd

controller: docker-build ## build IMG, load it into the kind cluster KIND_CLUSTER, deploy
	$(call need,$(KIND),to load the image into a kind cluster)
	$(KIND) load docker-image $(IMG) --name $(KIND_CLUSTER)
	$(MAKE) --no-print-directory deploy

kind-cluster: ## create the kind cluster KIND_CLUSTER (default linkerd-config)
	$(call need,$(KIND),to create a local cluster in Docker)
	$(KIND) create cluster --name $(KIND_CLUSTER)

cert-manager: ## install cert-manager (webhook certificates in a real cluster)
	$(call need,$(KUBECTL),to talk to your cluster)
	$(KUBECTL) apply -f https://github.com/cert-manager/cert-manager/releases/download/$(CERT_MANAGER_VERSION)/cert-manager.yaml

emojivoto: ## install Linkerd's emojivoto demo app and opt its pods in to restarts
	$(call need,$(KUBECTL),to talk to your cluster)
	$(KUBECTL) apply -f https://run.linkerd.io/emojivoto.yml
	for d in emoji vote-bot voting web; do \
	  $(KUBECTL) -n emojivoto patch deploy $$d --type=merge \
	    -p '{"spec":{"template":{"metadata":{"labels":{"config.linkerd.io/reconcile":"auto"}}}}}'; \
	done

clean: ## remove the venv and caches in the repo (not the built binaries)
	rm -rf $(VENV) .pytest_cache $(RESULTS) .mypy_cache .ruff_cache .hypothesis *.egg-info
