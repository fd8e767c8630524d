"""Audit a zoo checkpoint with the card protocols and write its MODEL_CARD.md and card.json.

    python experiments/zoo/make_card.py reachlens/assets/zoo/base                      # every card task
    python experiments/zoo/make_card.py reachlens/assets/zoo/grpo-s50 --tasks arith_hard

The card protocols are the zoo's fixed measurements, one per task: the test split (n=300), greedy
deployment, K=64 samples at T=0.8, seed 0, "qa" prompts; 96 new tokens on ``arith`` (the three-tier
mix) and 128 on ``arith_hard`` (3-6 operations, whose worked solutions run longer). Each command it
records reproduces its numbers exactly (same seed, same samples), e.g. `reachlens audit zoo:NAME --task
arith_hard --n 300 --k 64 --temperature 0.8 --max-new-tokens 128 --seed 0 --out DIR`. A model trained
in another prompt format (the SFT line's "verbose") is also measured in that format on ``arith_hard`` (card
key ``arith_hard@verbose``): the prompt-format control. An existing card.json keeps the audits not re-measured.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

CARD_TASKS = {
    "arith": ["--n", "300", "--k", "64", "--temperature", "0.8", "--max-new-tokens", "96", "--seed", "0"],
    "arith_hard": ["--n", "300", "--k", "64", "--temperature", "0.8", "--max-new-tokens", "128", "--seed", "0"],
}
TASK_TITLES = {"arith": "arith test split (three tiers, 2-5 operations)",
               "arith_hard": "arith_hard test split (3-6 operations)"}


FORMAT_CONTROL = ("arith_hard",)
"""Tasks on which a model trained in another prompt format (SFT's "verbose") is also measured in it: the card
key is ``TASK@FORMAT`` (the prompt-format control of the lineage on the hard tier)."""


def card_command(name: str, task: str, out: Path, prompt_format: str | None = None) -> list[str]:
    fmt = [] if prompt_format is None else ["--prompt-format", prompt_format]
    return ["audit", f"zoo:{name}", "--task", task, *CARD_TASKS[task], *fmt, "--out", str(out)]


def measure(name: str, key: str, runs: Path) -> dict:
    """Run the card audit ``key`` (``TASK`` or ``TASK@FORMAT``) of ``zoo:NAME`` into a fresh directory; its
    card entry."""
    from reachlens.cli.main import main as cli

    task, _, prompt_format = key.partition("@")
    out = runs / key.replace("@", "-") / name
    # the card measures this checkpoint: an audit directory left by an earlier build of the same name
    # would be refused (another model fingerprint), so the card's audit always starts fresh
    if out.exists():
        shutil.rmtree(out)
    cmd = card_command(name, task, out, prompt_format or None)
    t0 = time.perf_counter()
    code = cli(cmd)
    if code != 0:
        sys.exit(code)
    import pandas as pd

    summary = json.loads((out / "summary.json").read_text())
    q = pd.read_parquet(out / "questions.parquet")
    return {"D": summary["D"], "O_K": summary["O_K"], "k": summary["k"], "n": summary["n"],
            "pass_at_k": summary["pass_at_k"], "protocol_hash": summary["protocol_hash"],
            "command": "reachlens " + " ".join(cmd), "wall_seconds": round(time.perf_counter() - t0, 1),
            # per question, so a test can re-audit a prefix and check it sample for sample
            "questions": {"question_id": q["question_id"].tolist(), "realized": [bool(x) for x in q["realized"]],
                          "n_correct": [int(x) for x in q["n_correct"]]}}


def write_markdown(folder: Path, training: dict, audits: dict) -> None:
    name = folder.name
    n_layers = json.loads((folder / "config.json").read_text()).get("num_hidden_layers", "?")
    # per-step logs stay in training.json; the card lists the settings
    hyper = {k: v for k, v in sorted(training.items())
             if k not in ("command", "model", "recipe", "parent") and not k.endswith("_log")}
    parent = f" from `zoo:{Path(training['parent']).name}`" if training.get("parent") else ""
    if "snapshot_step" in training:
        parent += (f", the snapshot at optimizer step {training['snapshot_step']} of the run that made "
                   f"`zoo:{training['trajectory_of']}`")
    lines = [
        f"# zoo:{name}", "",
        f"A {training.get('parameters', 0):,}-parameter Llama-style causal LM ({n_layers} layers), "
        f"recipe **{training.get('recipe')}**{parent}, trained by reachlens on the synthetic `arith` tasks. "
        "Character-level tokenizer; safetensors weights.", "",
        "## How it was made", "", "```bash", training.get("command", "?"), "```", "",
        f"- seed: {training.get('seed')}", f"- wall time on the 2-core CPU: {training.get('wall_seconds')} s",
        f"- parameters: {training.get('parameters'):,}",
        *[f"- {k}: {v}" for k, v in hyper.items() if k not in ("seed", "wall_seconds", "parameters")], "",
    ]
    if training.get("prompt_format", "qa") != "qa":
        lines += [f"Its native prompt format is `{training['prompt_format']}`; the card measures every model under "
                  f"the shared `qa` prompt, and this one also under its own on `arith_hard` (the prompt-format "
                  "control).", ""]
    for key, a in audits.items():
        task, _, prompt_format = key.partition("@")
        lines += [
            f"## Measured: {TASK_TITLES.get(task, task)}, n={a['n']}, \"{prompt_format or 'qa'}\" prompts, "
            "greedy deployment, "
            f"K={a['k']} at T=0.8", "",
            f"| D (realized) | O_{a['k']} (reachable) | gap | pass@1 |", "|---|---|---|---|",
            f"| {a['D']:.3f} | {a['O_K']:.3f} | {a['O_K'] - a['D']:+.3f} | {a['pass_at_k']['1']:.3f} |", "",
            "Reproduce exactly (same seed, same samples):", "", "```bash", a["command"], "```", "",
        ]
    (folder / "MODEL_CARD.md").write_text("\n".join(lines))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("folder")
    ap.add_argument("--tasks", nargs="+", default=list(CARD_TASKS), choices=list(CARD_TASKS),
                    help="which card protocols to (re)measure (default: all)")
    ap.add_argument("--runs", default="runs/zoo-cards", help="where the card audits are written")
    args = ap.parse_args(argv)
    folder = Path(args.folder)
    training = json.loads((folder / "training.json").read_text())
    card_path = folder / "card.json"
    card = json.loads(card_path.read_text()) if card_path.is_file() else {}
    audits = dict(card.get("audits", {}))
    native = training.get("prompt_format", "qa")
    keys = [*args.tasks, *(f"{t}@{native}" for t in args.tasks if native != "qa" and t in FORMAT_CONTROL)]
    for key in keys:
        audits[key] = measure(folder.name, key, Path(args.runs))
        print(f"{folder.name} on {key}: D={audits[key]['D']:.3f} O_64={audits[key]['O_K']:.3f}", flush=True)
    order = [*CARD_TASKS, *(f"{t}@{native}" for t in FORMAT_CONTROL)]
    audits = {t: audits[t] for t in order if t in audits}
    card_path.write_text(json.dumps({"audits": audits}, indent=2, sort_keys=True) + "\n")
    write_markdown(folder, training, audits)
    print(f"wrote {folder / 'MODEL_CARD.md'}")


if __name__ == "__main__":
    main()
