# reachlens: `make test` and `make demo` create the environment they need.
PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: test demo bench clean-venv

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "need $(PYTHON) (set PYTHON=...)"; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch==2.13.0 is pinned in pyproject.toml: it takes the CPU build on disk, not a CUDA build
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -q

demo: $(STAMP)
	$(PY) -m reachlens audit zoo:base --task arith --n 300 --k 64 --temperature 0.8 --max-new-tokens 96 --out runs/demo/base

bench: $(STAMP)
	$(PY) benchmarks/bench_sampling.py

clean-venv:
	rm -rf $(VENV)
