"""Audits of zoo:base on the vLLM backend, for tests/scale/test_vllm_backend.py (run isolated).

    python tests/scale/vllm_driver.py OUT

Writes ``OUT/k200`` (N questions, K=200), ``OUT/k8`` extended to ``OUT/k16`` (the first NE
questions), ``OUT/k16-fresh`` (the same at K=16 from scratch), and prints ``{"extension_seeds": [...]}``:
the seeds of every sampled row the extension sent to vLLM.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import reachlens
from reachlens import Protocol
from reachlens.models import load_vllm

N, K, MAX_NEW_TOKENS = 16, 200, 48
NE = 6  # questions of the extension check


def main() -> None:
    out = Path(sys.argv[1])
    model = load_vllm("zoo:base")
    task = reachlens.load_task("arith", n=N)
    reachlens.audit(model, task, Protocol("arith", k=K, max_new_tokens=MAX_NEW_TOKENS), out=out / "k200")
    small = task.head(NE)
    reachlens.audit(model, small, Protocol("arith", k=8, max_new_tokens=MAX_NEW_TOKENS), out=out / "k8")
    seeds = []
    real = model.generate_rows
    model.generate_rows = lambda prompts, rows, params: seeds.extend(r.seed for r in rows) or real(prompts, rows, params)
    reachlens.rerun(out / "k8", model=model, task=small, k=16, into=out)  # the budget control: out/k8--k=16
    model.generate_rows = real
    reachlens.audit(model, small, Protocol("arith", k=16, max_new_tokens=MAX_NEW_TOKENS), out=out / "k16-fresh")
    print(json.dumps({"extension_seeds": seeds, "vllm": model.vllm_version}), flush=True)
    model.close()


if __name__ == "__main__":
    main()
