# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
# Both build .venv idempotently. The venv sees the system site-packages so a torch
# the user already has (CUDA, ROCm, MPS) is kept; only when none is importable is
# $(TORCH_SPEC) installed (here a CPU wheel on local disk; elsewhere pass
# TORCH_PIP_ARGS="--index-url <your CPU wheel index>" to avoid a CUDA download).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
TORCH_SPEC ?= torch==2.13.0
TORCH_PIP_ARGS ?=
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv --system-site-packages $(VENV)
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q $(TORCH_PIP_ARGS) "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e ".[test]"
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/ddplab cost
	$(VENV)/bin/ddplab simulate homelab-1gbe --sweep-ranks 2,4,8,16,64,256,1024 --steps 50
	$(VENV)/bin/ddplab simulate h100-1024 --sweep-ranks 8,16,64,256,1024 --steps 50
	$(VENV)/bin/ddplab simulate mi300x-1024 --sweep-ranks 8,16,64,256,1024 --steps 50

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

test: lint
	$(PY) -m pytest -q

bench: $(STAMP)
	$(PY) bench/sim_speed.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
