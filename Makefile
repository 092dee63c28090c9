# Two commands do all the set-up on a machine with Python 3.10+ and make:
#   make lab    install if needed, generate the data, open JupyterLab on chapters/
#   make test   install if needed, generate the data, run every check
.DEFAULT_GOAL := help
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
NOTEBOOKS := $(sort $(wildcard chapters/*.ipynb)) $(sort $(wildcard chapters/exercises/*.ipynb))
# Tests run with a guard that refuses any connection off this machine (tests/netguard).
NETGUARD := PYTHONPATH=$(CURDIR)/tests/netguard COMPANION_NETGUARD_LOG=$(CURDIR)/build/netguard.log

.PHONY: help install data lab test unit notebooks bench assignments grade html doctor browser-deps shards lint format clean distclean

help: ## Show this help
	@grep -E '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

$(STAMP): requirements.txt requirements-dev.txt pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else "Python 3.10+ is needed; run: make PYTHON=python3.X ...")'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -r requirements-dev.txt -e .
	touch $(STAMP)

install: $(STAMP) ## Create .venv and install requirements + `common` (skipped when up to date)

data: $(STAMP) ## Generate the synthetic dataset in data/ (skipped when intact)
	$(BIN)/python data_scripts/make_synthetic_data.py

lab: data ## Open JupyterLab on chapters/ with the .venv kernel
	$(BIN)/jupyter lab --notebook-dir=chapters

test: data ## Run every check: ruff, unit tests, notebook hygiene, every notebook under nbval
	$(BIN)/ruff check .
	@mkdir -p build && rm -f build/netguard.log
	$(NETGUARD) $(BIN)/python -m pytest tests $(NOTEBOOKS) --nbval-lax --nbval-current-env \
		--nbval-cell-timeout=180 --timeout=300 -p no:cacheprovider -q

unit: data ## Run the unit tests only (no notebooks)
	$(NETGUARD) $(BIN)/python -m pytest tests -q --timeout=300

notebooks: data ## Re-execute every notebook top to bottom and refresh its .py twin
	$(BIN)/python -m common.notebooks build $(NOTEBOOKS)

bench: data ## Measure images/s of each pipeline formulation; writes build/bench/
	$(BIN)/python -m common.benchmark --out build/bench

assignments: $(STAMP) ## Write student versions of the exercise notebooks to build/assignments/
	$(BIN)/python -m common.assignments build --out build/assignments

grade: data ## Grade submissions: make grade SUBMISSIONS=path/to/folder (report in build/grades/)
	$(BIN)/python -m common.grading --submissions "$(SUBMISSIONS)" --out build/grades

html: $(STAMP) ## Build a static site of the executed chapters into build/html/
	$(BIN)/python -m common.site --out build/html

shards: data ## Write tar shards of the dataset to data/shards/ (chapter 5)
	$(BIN)/python data_scripts/make_shards.py

browser-deps: ## Install headless Chromium + CJK fonts for the site's browser test (Debian/Ubuntu; sudo unless root)
	$(SUDO) apt-get update
	$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y chromium fonts-noto-cjk

doctor: $(STAMP) ## Check this environment (versions, devices, /dev/shm, data) and suggest fixes
	$(BIN)/python -m common.doctor

lint: $(STAMP) ## Check .py and .ipynb files with ruff
	$(BIN)/ruff check .

format: $(STAMP) ## Fix what ruff can fix automatically (imports, upgrades)
	$(BIN)/ruff check --fix .

clean: ## Remove generated data and build outputs (keeps .venv)
	rm -rf data build runs .pytest_cache .ruff_cache
	find . -name __pycache__ -type d -prune -not -path './.venv/*' -exec rm -rf {} +

distclean: clean ## Also remove .venv
	rm -rf $(VENV)
