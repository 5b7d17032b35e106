# Two set-up commands: `make demo` runs the main job, `make test` runs the tests.
# Both create .venv and install the project into it first (once, again when pyproject.toml changes).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export TF_CPP_MIN_LOG_LEVEL ?= 2

# The workstation campaign: both pipelines, threads 1-8, local disk and tmpfs, 2,048 images.
DEMO_GRID ?= workload=microbench,readonly storage=local,tmpfs threads=1,2,4,8 dataset.num_images=2048

.PHONY: install demo test bench clean-venv

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(PY) -m campaign -m $(DEMO_GRID)

test: $(STAMP)
	$(PY) -m pytest $(PYTEST_ARGS)

# TF read-only pipeline versus fio over the same files (needs fio: apt-get install fio).
bench: $(STAMP)
	$(PY) -m benchmarks.readonly_vs_fio $(BENCH_ARGS)

clean-venv:
	rm -rf $(VENV)
