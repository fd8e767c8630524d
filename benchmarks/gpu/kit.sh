#!/usr/bin/env bash
# The wheels the lent GPU machine lacks, fetched here into .gpu-kit/ (ignored by git) for the device tool to carry.
#
#     bash benchmarks/gpu/kit.sh [PYTHON_VERSION]      # default 3.12: the H200 image's python3 (3.12.3)
#
# The H200 image (the device tool's KINDS.md, read 2026-12-04) has torch 2.11, transformers 5.17, tokenizers,
# safetensors, accelerate, numpy, pandas, pyarrow, jaxtyping, einops, sentencepiece, rich, tqdm, sympy and
# huggingface_hub, and nothing can be fetched there. What reachlens' engine, its CLI audit and the GPU
# benchmarks import beyond that is below, each without its dependencies (--no-deps): the image has the rest.
# transformer-lens' declared dependencies wandb and transformers-stream-generator are not imported by the
# bridge, so they stay out. Then benchmarks/gpu/run.sh runs there, with `carry: [".gpu-kit"]`.
set -euo pipefail
cd "$(dirname "$0")/../.."
PYV="${1:-3.12}"
KIT=.gpu-kit
rm -rf "$KIT" && mkdir -p "$KIT"
PY=${PY:-.venv/bin/python}
# pure-Python wheels, except multiprocess (one per Python version)
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version "$PYV" --platform manylinux2014_x86_64 \
    --implementation cp -d "$KIT" \
    'transformer-lens==4.3.0' 'datasets==5.2.0' 'dill==0.4.1' 'multiprocess==0.70.19' \
    'typeguard==4.6.1' 'fancy-einsum==0.0.3' \
    'math-verify==0.9.0' 'latex2sympy2_extended==1.11.0' 'antlr4-python3-runtime==4.13.2'
ls "$KIT"
# The device tool carries 64 MiB in all: the tracked files (the zoo's weights are most of them) and the kit.
# plotly (9.7 MiB) and beartype stay out: no step of run.sh renders a report or runs pytest.
tree=$(git ls-files -z | xargs -0 stat -c %s | awk '{s += $1} END {print s}')
kit=$(du -cb "$KIT"/* | tail -1 | cut -f1)
echo "tracked files $((tree / 1048576)) MiB + kit $((kit / 1024)) KiB of the 64 MiB a call carries"
test $((tree + kit)) -lt $((63 * 1048576)) || { echo "over 63 MiB: trim the kit or carry less"; exit 1; }
