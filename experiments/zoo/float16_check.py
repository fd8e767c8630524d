"""Store a zoo checkpoint in float16 and check that greedy decoding is unchanged (the zoo's size limit).

    python experiments/zoo/float16_check.py runs/zoo-strong runs/zoo-strong-f16 --formats qa,password

Writes ``OUT``: the weights cast to float16 (safetensors), the tokenizer, and the source's generation config and
``training.json``; then loads both folders the way the zoo's loader does (``dtype=float32``: float16 weights are
upcast) and prints, per prompt format, how many of the first ``--n`` ``arith_hard`` test questions get an identical
greedy completion (plain HuggingFace greedy, 128 new tokens, cut at the first newline).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import check_out_dir, load_parent, positive  # noqa: E402
from lock_password import greedy_texts, pw_prompt, qa_prompt  # noqa: E402

PROMPTS = {"qa": qa_prompt, "password": pw_prompt}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("src", help="a float32 checkpoint folder")
    ap.add_argument("out", help="new, empty folder for the float16 copy")
    ap.add_argument("--n", type=positive(int), default=300)
    ap.add_argument("--formats", default="qa", help=f"comma-separated, of {sorted(PROMPTS)}")
    args = ap.parse_args(argv)
    formats = args.formats.split(",")
    if bad := [f for f in formats if f not in PROMPTS]:
        ap.error(f"--formats {bad[0]!r} is not one of {sorted(PROMPTS)}")
    torch.set_num_threads(1)
    src, out = Path(args.src), check_out_dir(Path(args.out))
    model, tok = load_parent(src)
    half = load_parent(src)[0].to(torch.float16)
    half.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    for name in ("generation_config.json", "training.json"):
        if (src / name).is_file():
            shutil.copy(src / name, out / name)
    upcast, _ = load_parent(out)
    from reachlens.tasks import load_task

    qs = load_task("arith_hard", split="test", n=args.n).questions
    row = {"bytes_float32": (src / "model.safetensors").stat().st_size,
           "bytes_float16": (out / "model.safetensors").stat().st_size, "n": len(qs)}
    for f in formats:
        a, b = (greedy_texts(m, tok, [PROMPTS[f](q) for q in qs]) for m in (model, upcast))
        row[f"identical_{f}"] = sum(x == y for x, y in zip(a, b))
    print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
