VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
STAMP := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test

.PHONY: run test install bench clean

$(PY):
	python3 -m venv $(VENV)
	$(PIP) install -qq --upgrade pip

$(STAMP): pyproject.toml | $(PY)
	$(PIP) install -qq -e .
	touch $@

$(TEST_STAMP): pyproject.toml | $(PY)
	$(PIP) install -qq -e '.[test,bench]'
	touch $@ $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(VENV)/bin/detok serve --demo

test: $(TEST_STAMP)
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q -p no:cacheprovider $(PYTEST_ARGS)

bench: $(TEST_STAMP)
	$(PY) bench/decode.py
	$(PY) bench/pool.py

clean:
	rm -rf $(VENV) build *.egg-info
