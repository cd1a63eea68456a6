# The README's first two commands: `make run` and `make test`. Both install first.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
STAMP := $(VENV)/.install-stamp
DATA_DIR ?= ./data

.PHONY: install run test bench clean

install: $(STAMP)

# Re-run the install only when the dependency pins change; pip itself is idempotent.
# editable_mode=compat puts the checkout on sys.path: Spark finds the pyspark_nereus
# data source by scanning sys.path, which import hooks (the default editable mode) hide from it.
$(STAMP): pyproject.toml
	@command -v java >/dev/null || { echo "installing a Java runtime for Spark"; \
		apt-get update -q && apt-get install -y -q openjdk-17-jre-headless; }
	@test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --upgrade pip
	$(VENV)/bin/python -m pip install -q -e '.[test]' --config-settings editable_mode=compat
	@touch $(STAMP)

run: install
	$(VENV)/bin/nereus standalone --data-dir $(DATA_DIR)

# The web console tests drive a real headless Chromium; Debian's package, not a download.
test: install
	@command -v chromium >/dev/null || { echo "installing Chromium for the web console tests"; \
		apt-get update -q && apt-get install -y -q chromium; }
	$(VENV)/bin/python -m pytest -q

# Benchmarks (not part of the tests). The Pulsar reference needs Redis from Debian.
bench: install
	@command -v redis-server >/dev/null || { apt-get update -q && apt-get install -y -q redis-server redis-tools; }
	$(VENV)/bin/python bench/meta_storage_choice.py
	$(VENV)/bin/python bench/meta_topics.py
	$(VENV)/bin/python bench/oxia_server.py
	$(VENV)/bin/python bench/storage_append.py
	$(VENV)/bin/python bench/pulsar_e2e.py

clean:
	rm -rf $(VENV) build *.egg-info
