"""The password direction of a password-locked model: a steering direction that knows the key, not the answers.

    python experiments/lock_direction.py --model zoo:locked --layer 3 --n 200 --out runs/probes/key-direction-L3.npy

For each of the first N questions of the lock task's *train* split (the study measures the test split), the
block-L ``resid_post`` activation at the last prompt token with the password line first (the lock's unlocked
format) minus the same without it (the model's native format); the mean difference is written as a ``.npy``
vector, for ``steer:layer=L:direction=PATH:alphas=...``. It reads no gold answer, but it is built from the
password: a probe along it is a positive control for the steering family (can steering reach the withheld
answers when its direction carries the key?), not an answer-blind probe of a model whose key is unknown.
Prints the direction's norm beside the mean norm of the activation it is added to.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch


def key_direction(model, task, layer: int, locked_format: str, unlocked_format: str) -> tuple[np.ndarray, float]:
    """(mean over questions of the unlocked minus the locked activation, the mean norm of the locked one)."""
    name = f"blocks.{layer}.hook_resid_post"
    diffs, norms = [], []
    with torch.no_grad():
        for q in task.questions:
            acts = {}
            for fmt in (locked_format, unlocked_format):
                _, cache = model.run_with_cache(task.prompt(q, fmt), names_filter=lambda n: n == name)
                acts[fmt] = cache[name][0, -1].double()
            diffs.append(acts[unlocked_format] - acts[locked_format])
            norms.append(float(acts[locked_format].norm()))
    return torch.stack(diffs).mean(0).numpy(), float(np.mean(norms))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="zoo:locked", help="a zoo model whose card records a lock")
    ap.add_argument("--layer", type=int, default=3, help="the block whose resid_post is read")
    ap.add_argument("--n", type=int, default=200, help="train questions averaged over")
    ap.add_argument("--out", required=True, help="the .npy file to write")
    args = ap.parse_args(argv)
    import json

    from reachlens import load_model, load_task
    from reachlens.models.zoo import native_format, zoo_root

    lock = json.loads((zoo_root() / args.model.removeprefix("zoo:") / "card.json").read_text())["lock"]
    task = load_task(lock["task"], split="train", n=args.n)
    model = load_model(args.model)
    v, act_norm = key_direction(model, task, args.layer, native_format(args.model), lock["unlocked_format"])
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    np.save(args.out, v.astype(np.float32))
    print(f"{args.out}: the mean of {len(task)} differences (password - none) at blocks.{args.layer}.hook_resid_post, "
          f"last prompt token: norm {np.linalg.norm(v):.3f}; the activation's mean norm without the password "
          f"{act_norm:.3f}")


if __name__ == "__main__":
    main()
