"""Audit a zoo checkpoint with the card protocol and write its MODEL_CARD.md and card.json.

    python experiments/zoo/make_card.py reachlens/assets/zoo/base

The card protocol is the zoo's fixed measurement: the arith test split (n=300), greedy deployment,
K=64 samples at T=0.8, 96 new tokens, seed 0. The command it records reproduces the numbers exactly
(same seed, same samples): `reachlens audit zoo:NAME --task arith --n 300 --k 64 --temperature 0.8
--max-new-tokens 96 --seed 0 --out DIR`.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

CARD_ARGS = ["--task", "arith", "--n", "300", "--k", "64", "--temperature", "0.8", "--max-new-tokens", "96",
             "--seed", "0"]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("folder")
    ap.add_argument("--runs", default="runs/zoo-cards", help="where the card audits are written")
    args = ap.parse_args(argv)
    folder = Path(args.folder)
    name = folder.name
    out = Path(args.runs) / name
    from reachlens.cli.main import main as cli

    # the card measures this checkpoint: an audit directory left by an earlier build of the same name
    # would be refused (another model fingerprint), so the card's audit always starts fresh
    if out.exists():
        shutil.rmtree(out)
    cmd = ["audit", f"zoo:{name}", *CARD_ARGS, "--out", str(out)]
    t0 = time.perf_counter()
    code = cli(cmd)
    if code != 0:
        sys.exit(code)
    audit_s = time.perf_counter() - t0
    summary = json.loads((out / "summary.json").read_text())
    training = json.loads((folder / "training.json").read_text())
    command = "reachlens " + " ".join(cmd)
    import pandas as pd

    q = pd.read_parquet(out / "questions.parquet")
    card = {"audit": {"D": summary["D"], "O_K": summary["O_K"], "k": summary["k"], "n": summary["n"],
                      "pass_at_k": summary["pass_at_k"], "protocol_hash": summary["protocol_hash"],
                      "command": command, "wall_seconds": round(audit_s, 1),
                      # per question, so a test can re-audit a prefix and check it sample for sample
                      "questions": {"question_id": q["question_id"].tolist(),
                                    "realized": [bool(x) for x in q["realized"]],
                                    "n_correct": [int(x) for x in q["n_correct"]]}}}
    (folder / "card.json").write_text(json.dumps(card, indent=2, sort_keys=True) + "\n")
    # per-step logs stay in training.json; the card lists the settings
    n_layers = json.loads((folder / "config.json").read_text()).get("num_hidden_layers", "?")
    hyper = {k: v for k, v in sorted(training.items())
             if k not in ("command", "model", "recipe", "parent") and not k.endswith("_log")}
    lines = [
        f"# zoo:{name}", "",
        f"A {training.get('parameters', 0):,}-parameter Llama-style causal LM ({n_layers} layers), "
        f"recipe **{training.get('recipe')}**" + (f" from `zoo:{Path(training['parent']).name}`" if training.get("parent") else "")
        + ", trained by reachlens on the synthetic `arith` task. Character-level tokenizer; safetensors weights.", "",
        "## How it was made", "", "```bash", training.get("command", "?"), "```", "",
        f"- seed: {training.get('seed')}", f"- wall time on the 2-core CPU: {training.get('wall_seconds')} s",
        f"- parameters: {training.get('parameters'):,}",
        *[f"- {k}: {v}" for k, v in hyper.items() if k not in ("seed", "wall_seconds", "parameters")], "",
        "## Measured (arith test split, n=300, \"qa\" prompts, greedy deployment, K=64 at T=0.8)", "",
        *([f"Its native prompt format is `{training['prompt_format']}`; the card measures every model under the "
           f"shared `qa` prompt (the training audit's prompt-format control measures both).", ""]
          if training.get("prompt_format", "qa") != "qa" else []),
        "| D (realized) | O_64 (reachable) | gap | pass@1 |", "|---|---|---|---|",
        f"| {summary['D']:.3f} | {summary['O_K']:.3f} | {summary['O_K'] - summary['D']:+.3f} | "
        f"{summary['pass_at_k']['1']:.3f} |", "",
        "Reproduce exactly (same seed, same samples):", "", "```bash", command, "```", "",
    ]
    (folder / "MODEL_CARD.md").write_text("\n".join(lines))
    print(f"wrote {folder / 'MODEL_CARD.md'}: D={summary['D']:.3f} O_64={summary['O_K']:.3f}")


if __name__ == "__main__":
    main()
