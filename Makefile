# reachlens: `make test` and `make demo` create the environment they need.
PYTHON ?= python3.11
# The CPU build (it lies on disk here); reachlens itself accepts any torch>=2.6. Override with TORCH=...
TORCH  ?= torch==2.13.0
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: test demo zoo bench clean-venv

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "need $(PYTHON) (set PYTHON=...)"; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch first, so that reachlens' torch>=2.6 is already met and pip pulls no CUDA build
	$(PY) -m pip install -q '$(TORCH)'
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -q

demo: $(STAMP)
	$(PY) -m reachlens demo --out runs/demo

# Retrain every zoo checkpoint from scratch with fixed seeds, then re-measure each model card.
ZOO := reachlens/assets/zoo
zoo: $(STAMP)
	$(PY) experiments/zoo/build_zoo.py --zoo $(ZOO)

bench: $(STAMP)
	$(PY) benchmarks/bench_sampling.py
	$(PY) benchmarks/bench_routing.py
	$(PY) benchmarks/bench_demo.py

clean-venv:
	rm -rf $(VENV)
