"""Plant a veto (the MLP-silencing study's positive control): one known MLP block that suppresses the
correct answer on a defined subset of questions while recognition is left intact.

    python experiments/zoo/plant_veto.py --init reachlens/assets/zoo/base --out reachlens/assets/zoo/veto --layer 4 --steps 300 --seed 0

Construction. The parent (``--init``, a Llama-style zoo model) gets one *new* decoder block inserted at
index ``--layer`` (the parent's blocks ``layer..`` move up by one). The new block starts as the identity:
its attention output projection ``o_proj`` and its MLP's ``down_proj`` are zero, so the model computes
exactly what the parent computes. Then only that block's MLP (``gate_proj``, ``up_proj``,
``down_proj``) is trained; the attention stays off (``o_proj`` = 0, frozen) and every parent weight is
frozen. Zero-ablating the planted MLP therefore gives back the parent exactly.

The subset: questions whose answer is negative. The objective, on the parent's pretraining distribution
(``arith`` train split worked solutions, the same slip rate; teacher-forced):

* veto: at the position that predicts the first character of the final answer (right after ``"#### "``),
  when that character is ``"-"``, push its probability down: ``-log(1 - p("-"))``. Greedy generation
  then writes the worked steps as the parent does and a positive number as the answer: wrong.
* preservation: KL(parent || model) at every other completion position of every text (and at that
  position for non-negative answers), so the rest of generation, and the likelihood of every worked
  solution up to its final answer, stays the parent's.

Recognition (``arith_mc``: the likelihood of four whole worked solutions) stays intact because the veto
lowers the ``"-"`` of the gold solution and of its (mostly also negative) slipped distractors alike.
The card records the subset rule, the planted layer and what the MLP-silencing study must find
there (``experiments/mlp_veto.py --planted``). One torch thread.
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import check_out_dir, library_versions, load_parent, parent_summary, positive, save_finetuned, set_seed  # noqa: E402

from reachlens.tasks.arith import ArithConfig, pretraining_texts  # noqa: E402

ANSWER_MARK = "#### "


def insert_identity_block(parent, layer: int):
    """A copy of ``parent`` with one more decoder block at index ``layer`` that adds exactly zero."""
    from transformers import AutoModelForCausalLM

    cfg = copy.deepcopy(parent.config)
    n = cfg.num_hidden_layers
    if not 0 <= layer <= n:
        raise SystemExit(f"--layer {layer} must lie in 0..{n} (the parent has {n} blocks)")
    cfg.num_hidden_layers = n + 1
    if getattr(cfg, "layer_types", None):
        cfg.layer_types = list(cfg.layer_types[:layer]) + [cfg.layer_types[min(layer, n - 1)]] + list(cfg.layer_types[layer:])
    child = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    src = parent.state_dict()
    dst = child.state_dict()
    for key, value in src.items():
        if ".layers." in key:
            head, rest = key.split(".layers.", 1)
            idx, tail = rest.split(".", 1)
            idx = int(idx) + (int(idx) >= layer)
            key = f"{head}.layers.{idx}.{tail}"
        dst[key] = value.clone()
    new = child.model.layers[layer]
    with torch.no_grad():
        new.self_attn.o_proj.weight.zero_()
        new.mlp.down_proj.weight.zero_()
    child.load_state_dict({k: v for k, v in dst.items() if not k.startswith(f"model.layers.{layer}.")}, strict=False)
    return child


def encode(tok, texts: list[str]):
    """Right-padded ids, the completion mask (after ``"\\nA:"``) and the veto position of each text.

    The veto position is the index whose logits predict the character right after ``"#### "``; -1 when the
    answer is not negative."""
    ids, comp, veto = [], [], []
    for t in texts:
        x = tok(t, add_special_tokens=True)["input_ids"] + [tok.eos_token_id]
        start = len(tok(t[: t.index("\nA:") + 3], add_special_tokens=True)["input_ids"])
        mark = t.rindex(ANSWER_MARK) + len(ANSWER_MARK)
        pos = len(tok(t[:mark], add_special_tokens=True)["input_ids"]) - 1
        ids.append(x)
        comp.append((start - 1, len(x) - 1))  # logits at [start-1, len-1) predict the completion tokens
        veto.append(pos if t[mark] == "-" else -1)
    width = max(map(len, ids))
    out = torch.full((len(ids), width), tok.pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(ids), width), dtype=torch.bool)
    for i, x in enumerate(ids):
        out[i, : len(x)] = torch.tensor(x)
        mask[i, comp[i][0] : comp[i][1]] = True
    return out, mask, torch.tensor(veto)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--init", required=True, help="parent checkpoint folder (reachlens/assets/zoo/base)")
    ap.add_argument("--out", required=True, help="new, empty folder")
    ap.add_argument("--layer", type=int, default=4, help="index of the planted block in the new model (default 4)")
    ap.add_argument("--steps", type=positive(int), default=300)
    ap.add_argument("--batch", type=positive(int), default=64)
    ap.add_argument("--lr", type=positive(float), default=1e-3)
    ap.add_argument("--veto-weight", type=positive(float), default=1.0)
    ap.add_argument("--slip-rate", type=float, default=0.25, help="as the parent's pretraining (default 0.25)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=positive(int), default=1)
    ap.add_argument("--log-every", type=positive(int), default=25)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    out = check_out_dir(Path(args.out))
    set_seed(args.seed)
    parent, tok = load_parent(args.init)
    parent.eval()
    model = insert_identity_block(parent, args.layer)
    for name, p in model.named_parameters():
        p.requires_grad = name.startswith(f"model.layers.{args.layer}.mlp.")
    trained = [p for p in model.parameters() if p.requires_grad]
    minus = tok.convert_tokens_to_ids("-")
    # the parent's pretraining distribution, from a text stream of its own (seed 1000 + seed)
    texts = pretraining_texts(ArithConfig(seed=0), args.steps * args.batch, args.slip_rate, seed=1000 + args.seed)
    opt = torch.optim.AdamW(trained, lr=args.lr, weight_decay=0.0)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"veto: {n_params:,} parameters ({sum(p.numel() for p in trained):,} trained, block {args.layer}), "
          f"{args.steps} steps x {args.batch}", flush=True)
    log, t0 = [], time.perf_counter()
    model.train()
    for step in range(args.steps):
        ids, mask, veto = encode(tok, texts[step * args.batch : (step + 1) * args.batch])
        attn = (ids != tok.pad_token_id).long()
        with torch.no_grad():
            ref = F.log_softmax(parent(input_ids=ids, attention_mask=attn).logits.float(), -1)
        logp = F.log_softmax(model(input_ids=ids, attention_mask=attn).logits.float(), -1)
        rows = (veto >= 0).nonzero().flatten()
        keep = mask.clone()
        keep[rows, veto[rows]] = False
        kl = (ref.exp() * (ref - logp)).sum(-1)[keep].mean()
        p_minus = logp[rows, veto[rows], minus].exp()
        veto_loss = -torch.log1p(-p_minus.clamp(max=1 - 1e-6)).mean() if len(rows) else logp.sum() * 0
        loss = kl + args.veto_weight * veto_loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % args.log_every == 0 or step == args.steps - 1:
            row = {"step": step, "kl": round(kl.item(), 5), "veto_loss": round(veto_loss.item(), 4),
                   "p_minus": round(p_minus.mean().item(), 4) if len(rows) else None, "n_veto": len(rows)}
            log.append(row)
            print(f"step {step:4d}  kl {row['kl']:.5f}  veto {row['veto_loss']:.4f}  p('-') {row['p_minus']}  "
                  f"{time.perf_counter() - t0:6.1f}s", flush=True)
    wall = time.perf_counter() - t0
    command = "python experiments/zoo/plant_veto.py " + " ".join(sys.argv[1:] if argv is None else argv)
    save_finetuned(model, tok, args.init, out, {
        "recipe": "planted-veto", "command": command, "seed": args.seed, "parent": str(args.init),
        "parent_card": parent_summary(args.init), "steps": args.steps, "batch": args.batch, "lr": args.lr,
        "prompt_format": "qa", "veto_weight": args.veto_weight, "slip_rate": args.slip_rate,
        "planted": {"layer": args.layer, "component": "mlp", "subset": "answer < 0",
                    "construction": f"identity block inserted at {args.layer} (o_proj = down_proj = 0), then only its "
                                    "MLP trained: -log(1 - p('-')) right after '#### ' on negative answers, "
                                    "KL(parent || model) on every other completion position"},
        "parameters": n_params, "threads": args.threads, "wall_seconds": round(wall, 1),
        "seconds_per_step": round(wall / args.steps, 3), "loss_log": log, "versions": library_versions(),
    })
    print(f"saved {out} after {wall:.0f}s", flush=True)


if __name__ == "__main__":
    main()
