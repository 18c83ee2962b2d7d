# wanka — two commands for a fresh machine: `make demo` and `make test`.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
TORCH   := torch==2.13.0
TORCHAO := torchao==0.18.0

.PHONY: demo test venv clean

venv: $(STAMP)

# torch first, pinned, so pip never resolves a CUDA build; torchao without deps (it would pull torch).
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q $(TORCH)
	$(BIN)/pip install -q -e ".[all,dev]"
	$(BIN)/pip install -q --no-deps $(TORCHAO) || echo "torchao not installed: int8 falls back to torch kernels"
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m wanka.demo

test: $(STAMP)
	$(BIN)/python -m pytest

clean:
	rm -rf $(VENV) .pytest_cache build dist
