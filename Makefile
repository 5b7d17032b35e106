# Two set-up commands: `make demo` runs the main job, `make test` runs the tests.
# Both create .venv and install the project into it first (once, again when pyproject.toml changes).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export TF_CPP_MIN_LOG_LEVEL ?= 2

# framework=pytorch: the torch installed when the environment has none (a GPU node: TORCH=torch, or your
# site's wheel; one already in the environment is kept)
TORCH ?= torch==2.13.0

# storage=azure's embedded server: Azurite, Microsoft's Azure Storage emulator, from npm into the venv
# (Node.js 18 or later); without npm, storage=azure says so at planning and the rest works
AZURITE_VERSION ?= 3.37.0
AZURITE = if command -v npm >/dev/null 2>&1; then npm install --prefix $(VENV)/azurite --no-audit \
	--no-fund --silent azurite@$(AZURITE_VERSION); else echo "npm not found: storage=azure will say so"; fi

# The paper's study at workstation scale (emulated tiers as root, local disk and tmpfs otherwise).
DEMO_ARGS ?= --scale workstation

.PHONY: install demo test lint bench bench-plan clean-venv bytecode

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -c 'import torch' 2>/dev/null || $(PY) -m pip install -q '$(TORCH)'
	$(PY) -m pip install -q -e '.[test,pytorch,s3,jax,azure]'
	$(AZURITE)
	touch $(STAMP)

install: $(STAMP)

demo: bytecode
	$(PY) -m campaign +experiment=paper $(DEMO_ARGS)

# The project's own modules compiled once into their __pycache__ folders (git ignores them), also where
# PYTHONDONTWRITEBYTECODE is set (as in CI's image): every Python a test or a cell starts (commands,
# tasks, workers, Slurm jobs) then reads them instead of compiling them again, 0.1-0.2 s of CPU each.
# Only files changed since are compiled again.
# The tests write theirs too (PYTHONDONTWRITEBYTECODE emptied for them): pytest keeps a test module with its
# asserts rewritten only where bytecode may be written, and each of the suite's workers collects every module.
bytecode: $(STAMP)
	$(PY) -m compileall -q campaign jobs analysis benchmarks hydra_plugins >/dev/null

test: bytecode
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	PYTHONDONTWRITEBYTECODE= $(PY) -m pytest $(PYTEST_ARGS)

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

# How fast a campaign is planned: dry runs of 1,000 and 10,000 cells.
bench-plan: $(STAMP)
	$(PY) -m benchmarks.plan

# TF read-only pipeline versus fio over the same files (needs fio: apt-get install fio).
bench: $(STAMP)
	$(PY) -m benchmarks.readonly_vs_fio $(BENCH_ARGS)

clean-venv:
	rm -rf $(VENV)
