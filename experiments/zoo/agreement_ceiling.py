"""How fragile a weak policy's greedy answers are: the agreement of a model's final answers with its own, after
Gaussian weight noise as the weight-noise probe draws it (``dW = sigma * std(W) * N`` on the attention and MLP
maps, :func:`~reachlens.interventions.weight_noise_deltas`), on ``lock_strong.py``'s validation questions.

    python experiments/zoo/agreement_ceiling.py --model reachlens/assets/zoo/base --init /tmp/h57/strong \
        --sigma 0.01,0.03 --seeds 0,1

The lock's acceptance asks its password-free answers to reproduce the weak model's (agreement >= 0.8). A model
a short fine-tune away from the weak one has to land within the distance at which the weak model stops agreeing
with itself; this script measures that distance. ``--init`` is the strong checkpoint whose card names the
validation questions (the lock's draw, ``--seed``/``--n-val`` as there).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import load_parent, positive  # noqa: E402
from lock_password import greedy_texts, qa_prompt  # noqa: E402
from lock_strong import answers, lock_questions  # noqa: E402


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="the weak model")
    ap.add_argument("--init", required=True, help="the strong checkpoint whose card names the validation questions")
    ap.add_argument("--sigma", type=lambda s: [float(x) for x in s.split(",")], required=True)
    ap.add_argument("--seeds", type=lambda s: [int(x) for x in s.split(",")], default=[0, 1])
    ap.add_argument("--n-val", type=positive(int), default=100)
    ap.add_argument("--n-lock", type=positive(int), default=2000)
    ap.add_argument("--seed", type=int, default=0, help="the lock's seed (its question draw)")
    return ap.parse_args(argv)


def main(argv=None) -> list[dict]:
    args = parse_args(argv)
    torch.set_num_threads(1)
    from reachlens.grading import get_grader
    from reachlens.tasks import load_task

    grade, split = get_grader("numeric").grade, load_task("arith_hard", split="train").questions
    val = [split[i] for i in lock_questions(args, json.loads((Path(args.init) / "training.json").read_text()))[1]]
    model, tok = load_parent(args.model)
    clean = {n: p.detach().clone() for n, p in model.state_dict().items()}
    ref_texts = greedy_texts(model, tok, [qa_prompt(q) for q in val])
    ref, d_ref = answers(ref_texts, val, grade)
    wrong = [i for i, (t, q) in enumerate(zip(ref_texts, val)) if not grade(t, q.gold).correct]
    rows = []
    for sigma in args.sigma:
        for seed in args.seeds:
            model.load_state_dict(clean)
            gen = torch.Generator().manual_seed(seed)
            with torch.no_grad():
                for name, w in model.named_parameters():
                    if w.dim() == 2 and (".self_attn." in name or ".mlp." in name):
                        w.add_(sigma * w.std() * torch.randn(w.shape, generator=gen))
            got, d = answers(greedy_texts(model, tok, [qa_prompt(q) for q in val]), val, grade)
            rows.append({"sigma": sigma, "seed": seed, "D": d, "D_clean": d_ref,
                         "agreement": sum(a == b for a, b in zip(got, ref)) / len(val),
                         "agreement_where_wrong": sum(got[i] == ref[i] for i in wrong) / max(1, len(wrong))})
            print(json.dumps(rows[-1]), flush=True)
    return rows


if __name__ == "__main__":
    main()
