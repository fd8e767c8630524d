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
# bridge, so they stay out. nnsight (bench_peers.py's fourth tool) and what it imports that the image lacks (pydantic
# and its core, greenlet, cloudpickle, ...: about 3.6 MiB) join the kit only if they fit under the limit below;
# otherwise bench_peers.py's nnsight row says it is not installed. Then benchmarks/gpu/run.sh runs there, with
# `carry: [".gpu-kit"]`.
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
    'math-verify==0.9.0' 'latex2sympy2_extended==1.11.0' 'antlr4-python3-runtime==4.13.2' \
    'pytest==9.2.0' 'pluggy==1.7.0' 'iniconfig==2.3.1'
ls "$KIT"
# The device tool carries 64 MiB in all: the tracked files (the zoo's weights are most of them) and the kit.
# plotly (9.7 MiB) and beartype stay out: no step of run.sh renders a report, and run.sh runs the GPU suite (pytest,
# carried above) without the jaxtyping/beartype runtime checks (-o addopts="").
tree=$( (git ls-files -z; git ls-files -z --others --exclude-standard) | xargs -0 stat -c %s | awk '{s += $1} END {print s}')
kit=$(du -cb "$KIT"/* | tail -1 | cut -f1)
echo "working tree $((tree / 1048576)) MiB + kit $((kit / 1024)) KiB of the 64 MiB a call carries"
test $((tree + kit)) -lt $((63 * 1048576)) || { echo "over 63 MiB: trim the kit or carry less"; exit 1; }
NN=$(mktemp -d)
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version "$PYV" --platform manylinux2014_x86_64 \
    --platform manylinux_2_28_x86_64 --implementation cp -d "$NN" \
    'nnsight==0.8.1' 'greenlet==3.5.6' 'cloudpickle==3.1.3' 'pydantic==2.14.4' 'pydantic-core==2.50.5' \
    'annotated-types==0.8.0' 'typing-inspection==0.4.5'
nn=$(du -cb "$NN"/* | tail -1 | cut -f1)
if [ $((tree + kit + nn)) -lt $((63 * 1048576)) ]; then
  mv "$NN"/*.whl "$KIT"/ && echo "nnsight and its imports join the kit ($((nn / 1024)) KiB)"
else
  echo "nnsight left out: its wheels ($((nn / 1024)) KiB) would take the call over 63 MiB (bench_peers.py says so)"
fi
rm -rf "$NN"
