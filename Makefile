# Two commands do all the set-up on a machine with Python 3.10+ and make:
#   make lab    install if needed, generate the data, open JupyterLab on chapters/ (repo root served)
#   make test   install if needed, generate the data, run every check
.DEFAULT_GOAL := help
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
# The PyTorch wheel index: empty for PyPI's default build (CUDA on Linux, about 5 GB), `cpu` for the
# CPU-only build (about 1 GB): `make install TORCH_INDEX=cpu`, or any index URL.
TORCH_INDEX ?=
TORCH_INDEX_URL := $(if $(filter cpu,$(TORCH_INDEX)),https://download.pytorch.org/whl/cpu,$(TORCH_INDEX))
# The exact versions of a green run, written by `make constraints`: `make install CONSTRAINTS=constraints.txt`
# installs them (CI does); without it the requirement files' ranges resolve to the newest releases.
CONSTRAINTS ?=
TORCH_REQUIREMENTS := $(if $(CONSTRAINTS),$(shell grep -E '^torch(vision)?==' $(CONSTRAINTS)),"torch>=2.6" "torchvision>=0.21")
# Lab serves the repository root (so ../GLOSSARY.md, README.md and common/ open from any notebook)
# and opens on chapters/. tests/test_lab.py starts a server with exactly these flags.
LAB_FLAGS := --ServerApp.root_dir=. --LabApp.default_url=/lab/tree/chapters
# Jupyter refuses to start as root (as in many containers) unless told to.
LAB_ARGS ?= $(shell [ "$$(id -u)" = 0 ] && echo --allow-root)
# The notebooks `make notebooks` executes: the chapters and the exercises' instructor sources (the
# student versions in chapters/exercises/ are generated from these by `make assignments`).
NOTEBOOKS := $(sort $(wildcard chapters/*.ipynb)) $(sort $(wildcard chapters/exercises/solutions/*.ipynb))
# `make test` runs each notebook once, by its strongest check: the exercise notebooks are graded
# (instructor solutions to full marks, student versions top to bottom: tests/system/test_grading_classroom.py,
# test_assignments_processes.py), the chapters that tests/system/test_installed.py runs from the
# installed wheel run there, every other chapter runs under nbval.
WHEEL_CHAPTERS := chapters/01_pytorch_basics.ipynb chapters/02_1_dataset_dataloader.ipynb \
	chapters/04_1_ddp_fundamentals.ipynb
# The Chinese edition is the English code with translated prose and comments (tests/unit/test_translate.py),
# run from chapters/zh; the chapter that runs on the learner's own folder (DATA_DIR) runs in both editions.
ZH_NBVAL_NOTEBOOKS := chapters/zh/07_your_data.ipynb
NBVAL_NOTEBOOKS := $(filter-out $(WHEEL_CHAPTERS),$(sort $(wildcard chapters/*.ipynb))) $(ZH_NBVAL_NOTEBOOKS)
# The run of `make test` (and `make durations`): the files longest first, from tests/durations.json
# (tests/durations.py), so that the workers finish together.
TEST_RUN = $(NETGUARD) $(BIN)/python -m pytest tests $(NBVAL_NOTEBOOKS) --nbval-lax \
	--nbval-current-env --nbval-cell-timeout=180 --timeout=300 -p no:cacheprovider -q -rs $(PYTEST_PARALLEL)
# Three pytest workers on two cores: many tests wait (a rendezvous, a timeout being hit, a browser, a
# rank's step delay), and a third worker keeps both cores busy meanwhile (two would leave them idle
# through every wait). --dist loadfile keeps all cells of a notebook in one kernel, in order.
PYTEST_PARALLEL ?= -n 3 --dist loadfile
# make check's unit tier waits for nothing: one worker per core.
CHECK_PARALLEL ?= -n 2 --dist loadfile
# Tests run with a guard that refuses any connection off this machine (tests/netguard), and with
# one math thread per process: two pytest workers (or two DDP ranks) on two cores would otherwise
# oversubscribe the CPU, and OpenMP's spinning threads then slow everything down many times over.
NETGUARD := PYTHONPATH=$(CURDIR)/tests/netguard COMPANION_NETGUARD_LOG=$(CURDIR)/build/netguard.log \
	OMP_NUM_THREADS=1

.PHONY: lab-hint help install constraints data lab test durations check tests system notebooks figures lessons bench bench-ddp bench-fsdp assignments grade grade-me html translations doctor system-deps shards lint format clean distclean

help: ## Show this help
	@grep -E '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

$(STAMP): requirements.txt requirements-dev.txt pyproject.toml $(CONSTRAINTS)
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else "Python 3.10+ is needed; run: make PYTHON=python3.X ...")'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(if $(TORCH_INDEX_URL),$(BIN)/python -m pip install --index-url $(TORCH_INDEX_URL) $(TORCH_REQUIREMENTS))
	$(BIN)/python -m pip install --no-compile -r requirements-dev.txt $(if $(CONSTRAINTS),-c $(CONSTRAINTS)) -e .
	# Byte-compiled on every core, where pip would compile each package on one (a fresh install on
	# 2 cores: 97 s instead of 117 s): the installed packages (a file pip would skip, such as a test fixture written
	# in Python 2, is skipped here too: its error is not the install's), then the repository's own
	# modules, which pip leaves to each process as an editable install's sources. Where
	# PYTHONDONTWRITEBYTECODE is set, every process (each torchrun worker, each kernel) would
	# otherwise compile them again, about 0.06 s of CPU for a trainer's imports.
	$(BIN)/python -m compileall -q -j 0 $$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))') > /dev/null || true
	$(BIN)/python -m compileall -q -j 0 common course data_scripts tests
	# The notebooks' kernel "python3", pinned to this venv's interpreter (inside the venv only).
	$(BIN)/python -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (.venv)"
	touch $(STAMP)

install: $(STAMP) ## Create .venv and install requirements + `common` (CPU-only torch: TORCH_INDEX=cpu; pinned: CONSTRAINTS=constraints.txt)

constraints: $(STAMP) ## Write constraints.txt: the exact versions in .venv of the project's dependencies (after a green make test)
	$(BIN)/python .ci/constraints.py > constraints.txt.new
	mv constraints.txt.new constraints.txt

data: $(STAMP) ## Generate the synthetic dataset in data/ (skipped when intact)
	$(BIN)/python data_scripts/make_synthetic_data.py

lab: data lab-hint ## Open JupyterLab on chapters/ (the repository root served) with the .venv kernel
	$(BIN)/jupyter lab $(LAB_FLAGS) $(LAB_ARGS)

lab-hint: ## Print how to open the Chinese edition (part of `make lab`)
	@echo "中文版 (Chinese edition): open chapters/zh/ in JupyterLab's file browser; see README.zh-CN.md"

test: data ## Run every check: ruff, both test tiers, every notebook by its strongest check (tiny sizes)
	$(BIN)/ruff check .
	@mkdir -p build && rm -f build/netguard.log
	$(TEST_RUN)

durations: data ## Run `make test`'s tests; record each file's seconds (tests/durations.json) and CPU seconds (build/cpu.json)
	@mkdir -p build && rm -f build/netguard.log
	COMPANION_RECORD_DURATIONS=tests/durations.json $(TEST_RUN)

check: data ## The edit loop (under a minute): ruff, actionlint on the CI workflow, the unit tier (tests/unit: no test starts a process), notebook hygiene
	$(BIN)/ruff check .
	$(BIN)/actionlint
	$(NETGUARD) $(BIN)/python -m pytest tests/unit -q --timeout=120 -p no:cacheprovider $(CHECK_PARALLEL)

tests: data ## Run both test tiers (tests/unit, tests/system), without the notebooks under nbval
	@mkdir -p build && rm -f build/netguard.log
	$(NETGUARD) $(BIN)/python -m pytest tests -q -rs --timeout=300 -p no:cacheprovider $(PYTEST_PARALLEL)

system: data ## Run the process tier alone (tests/system: torchrun, kernels, judges, the sandbox, the browser)
	@mkdir -p build && rm -f build/netguard.log
	$(NETGUARD) $(BIN)/python -m pytest tests/system -q -rs --timeout=300 -p no:cacheprovider $(PYTEST_PARALLEL)

notebooks: data ## Re-execute every notebook top to bottom, refresh its .py twin, the student versions and the zh edition
	@mkdir -p build
	$(NETGUARD) $(BIN)/python -m course.publishing.notebooks build $(NOTEBOOKS)
	$(MAKE) assignments translations

translations: $(STAMP) ## Update chapters/zh/po/*.po from the English notebooks, rebuild chapters/zh/
	$(BIN)/python -m course.publishing.translate extract
	$(BIN)/python -m course.publishing.translate build
	$(BIN)/python -m course.publishing.translate status

# make bench SIZE=3840 measures a 3,840-image dataset (generated once under build/bench/3840/data).
SIZE ?= 0
BENCH_OUT := build/bench$(if $(filter-out 0,$(SIZE)),/$(SIZE))
BENCH_SIZE := $(if $(filter-out 0,$(SIZE)),--size $(SIZE) --max-images 640)
bench: data ## Measure images/s of each pipeline, the shard reader, CPU per sample against pytorch/examples, the reader against its peers (PEERS_PYTHON=venv python; SIZE=N: an N-image dataset); writes build/bench/
	$(BIN)/python -m common.fast.benchmark --out $(BENCH_OUT) $(BENCH_SIZE)
	$(BIN)/python -m common.shards.bench --out build/bench/shards
	$(BIN)/python -m common.shards.sample_costs --out build/bench/sample_costs
	$(BIN)/python -m common.shards.peers --out build/bench/peers $(if $(PEERS_PYTHON),--python $(PEERS_PYTHON))

assignments: $(STAMP) ## Rebuild the student versions (chapters/exercises/, zh too) from the instructor sources in solutions/
	$(BIN)/python -m course.assignments build
	$(BIN)/python -m course.assignments build --sources chapters/zh/exercises/solutions

# GRADE_FLAGS: more options of `python -m course.grading`, e.g. --trusted for your own work without bubblewrap.
GRADE_FLAGS ?=
grade: data ## Grade submissions: make grade SUBMISSIONS=path/to/folder (report in build/grades/)
	$(BIN)/python -m course.grading --submissions "$(SUBMISSIONS)" --out build/grades $(GRADE_FLAGS)
grade-me: data ## Grade your own exercise notebook where it is: make grade-me NOTEBOOK=chapters/exercises/ex04_distributed_training.ipynb
	$(BIN)/python -m course.grading --self "$(NOTEBOOK)" $(GRADE_FLAGS)

html: $(STAMP) ## Build the tutorial site (Sphinx + myst-nb, both editions) into build/html/
	$(BIN)/python -m course.publishing.site --out build/html

shards: data ## Write tar shards of the dataset to data/shards/ (chapter 5)
	$(BIN)/python data_scripts/make_shards.py

# slurm-wlm + munge: tests/system/test_slurm.py starts its own one-host cluster (its own config,
# key and ports); the packages' system services need no setup.
# Debian's chromium, unless a browser the tests find is there already (tests/browser.py): the code host's
# Ubuntu runners have Google Chrome, and Ubuntu packages Chromium as a snap, not as Debian's chromium.
BROWSER_PACKAGE = $(shell for b in chromium chromium-browser google-chrome google-chrome-stable; do \
	command -v $$b >/dev/null && exit 0; done; echo chromium)
system-deps: ## Install the system parts the tests need (CI fails without them): Chromium + CJK fonts, bubblewrap + uidmap, Slurm + munge, g++ (torch.compile), iproute2 + nftables (network namespaces); Debian/Ubuntu
	$(SUDO) apt-get update
	$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y $(BROWSER_PACKAGE) fonts-noto-cjk bubblewrap uidmap \
		slurm-wlm munge g++ iproute2 nftables

figures: $(STAMP) ## Rewrite docs/figures.md's chapter table from the notebooks' stored readings (make check fails when it is stale)
	$(BIN)/python -m course.publishing.figures write

lessons: data ## Run the timing chapters at the learner's sizes and print each figure beside its promise (a benchmark: a quiet machine)
	$(BIN)/python -m course.publishing.figures lessons

bench-ddp: $(STAMP) ## DDP samples/s side by side: 1 rank, 1 rank + 1 worker, 2 ranks strong and weak
	$(BIN)/python -m common.ddp.bench

bench-fsdp: $(STAMP) ## Measure FSDP vs DDP on 2 CPU ranks side by side (samples/s and bytes per rank)
	$(BIN)/python -m common.fsdp.bench

doctor: $(STAMP) ## Check this environment (versions, devices, /dev/shm, data) and suggest fixes
	$(BIN)/python -m common.tools.doctor

lint: $(STAMP) ## Check .py and .ipynb files with ruff
	$(BIN)/ruff check .

format: $(STAMP) ## Format .py and .ipynb files (ruff format), then apply ruff's automatic fixes (imports, upgrades)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

clean: ## Remove generated data and build outputs (keeps .venv)
	rm -rf data build runs .pytest_cache .ruff_cache
	find . -name __pycache__ -type d -prune -not -path './.venv/*' -exec rm -rf {} +

distclean: clean ## Also remove .venv
	rm -rf $(VENV)
