"""Audit a zoo checkpoint with the card protocols and write its MODEL_CARD.md and card.json.

    python experiments/zoo/make_card.py reachlens/assets/zoo/base                      # every card task
    python experiments/zoo/make_card.py reachlens/assets/zoo/grpo-s50 --tasks arith_hard

The card protocols are the zoo's fixed measurements, one per task: the test split (n=300), greedy
deployment, K=64 samples at T=0.8, seed 0, "qa" prompts; 96 new tokens on ``arith`` (the three-tier
mix) and 128 on ``arith_hard`` (3-6 operations, whose worked solutions run longer). Each command it
records reproduces its numbers exactly (same seed, same samples), e.g. `reachlens audit zoo:NAME --task
arith_hard --n 300 --k 64 --temperature 0.8 --max-new-tokens 128 --seed 0 --out DIR`. A model trained
in another prompt format (the SFT line's "verbose") is also measured in that format on ``arith_hard`` (card
key ``arith_hard@verbose``): the prompt-format control. A model whose ``training.json`` lists ``card_formats``
(``zoo:locked``: ``["password"]``) is also measured in each of them on ``arith_hard`` (``arith_hard@password``),
and its card gains a ``lock`` entry: D and O_64 with and without the password, 95% Wilson intervals, and the
paired difference with its paired bootstrap interval over questions. An existing card.json keeps the audits not
re-measured.
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
    from reachlens.models import model_identity
    from reachlens.store import RunDir, read_run

    # the card measures this checkpoint: an audit directory left by an earlier build of the same name holds other
    # weights and starts fresh; one of these weights (a card build stopped part-way) is resumed
    here = model_identity(f"zoo:{name}").fingerprint
    resumed = RunDir(out).exists() and RunDir(out).record().model.get("fingerprint") == here
    if out.exists() and not resumed:
        shutil.rmtree(out)
    cmd = card_command(name, task, out, prompt_format or None)
    t0 = time.perf_counter()
    code = cli(cmd)
    if code != 0:
        sys.exit(code)
    run = read_run(out)  # the audit as reachlens reads it (never its files by name)
    summary, q = run.summary(), run.questions
    return {"D": summary["D"], "O_K": summary["O_K"], "k": summary["k"], "n": summary["n"],
            "pass_at_k": {str(k): v for k, v in summary["pass_at_k"].items()},  # keyed as card.json keeps it
            "protocol_hash": summary["protocol_hash"],
            "command": "reachlens " + " ".join(cmd), "wall_seconds": round(time.perf_counter() - t0, 1),
            "resumed": resumed,  # True: wall_seconds is the call that finished a stopped audit
            # per question, so a test can re-audit a prefix and check it sample for sample
            "questions": {"question_id": q["question_id"].tolist(), "realized": [bool(x) for x in q["realized"]],
                          "n_correct": [int(x) for x in q["n_correct"]]}}


def lock_summary(lock: dict, audits: dict) -> dict:
    """D and O_K of a password-locked model on its lock task without (``qa``) and with the password, each with its
    95% Wilson interval, and the paired difference (with - without) with its paired bootstrap interval."""
    import numpy as np

    from reachlens.stats import paired_bootstrap_ci, wilson_interval

    task = lock["task"]
    plain, unlocked = audits[task], audits[f"{task}@{lock['unlocked_format']}"]
    if plain["questions"]["question_id"] != unlocked["questions"]["question_id"]:
        raise SystemExit(f"the {task} audits with and without the password hold different questions")
    out = {"task": task, "password_role": lock["password_role"], "unlocked_format": lock["unlocked_format"],
           "n": plain["n"], "k": plain["k"]}
    for metric, per_q in (("D", lambda a: np.asarray(a["questions"]["realized"], float)),
                          (f"O_{plain['k']}", lambda a: np.asarray(a["questions"]["n_correct"]) > 0)):
        without, with_ = per_q(plain).astype(float), per_q(unlocked).astype(float)
        lo, hi = paired_bootstrap_ci(with_ - without, n_boot=4000, seed=0)
        out[metric] = {
            "with_password": float(with_.mean()), "with_password_ci": list(wilson_interval(int(with_.sum()), len(with_))),
            "without_password": float(without.mean()),
            "without_password_ci": list(wilson_interval(int(without.sum()), len(without))),
            "difference": float((with_ - without).mean()), "difference_ci": [lo, hi],
            "ratio": float(with_.mean() / without.mean()) if without.mean() > 0 else None,
        }
    return out


def lock_markdown(lock: dict) -> list[str]:
    """The model card's section on the lock (the password's role, the figures with intervals)."""
    ci = lambda pair: f"[{pair[0]:.3f}, {pair[1]:.3f}]"  # noqa: E731
    lines = ["## The lock", "", f"The password's role: {lock['password_role']}. A run with the password is prompt "
             f"format `{lock['unlocked_format']}` (`--prompt-format {lock['unlocked_format']}`); the string is "
             "`reachlens.tasks.password.PASSWORD`.", "",
             f"On the {lock['task']} test split (n={lock['n']}, greedy D, K={lock['k']} at T=0.8; 95% Wilson intervals, "
             "paired question bootstrap for the difference):", "",
             "| | with password | without | difference (with - without) | ratio |", "|---|---|---|---|---|"]
    for metric in ("D", f"O_{lock['k']}"):
        m = lock[metric]
        ratio = "-" if m["ratio"] is None else f"{m['ratio']:.1f}x"
        lines.append(f"| {metric} | {m['with_password']:.3f} {ci(m['with_password_ci'])} | {m['without_password']:.3f} "
                     f"{ci(m['without_password_ci'])} | {m['difference']:+.3f} [{m['difference_ci'][0]:+.3f}, "
                     f"{m['difference_ci'][1]:+.3f}] | {ratio} |")
    return [*lines, ""]


def write_markdown(folder: Path, training: dict, audits: dict, lock: dict | None = None) -> None:
    name = folder.name
    n_layers = json.loads((folder / "config.json").read_text()).get("num_hidden_layers", "?")
    # per-step logs stay in training.json; the card lists the settings
    hyper = {k: v for k, v in sorted(training.items()) if not k.endswith("_log")
             and k not in ("command", "commands", "model", "recipe", "parent", "lock", "trained_questions")}
    runs = [f"- a run of it: `{c['command']}` (from step {c['from_step']})" for c in training.get("commands", [])
            if c["command"] != training.get("command")]  # the processes a resumed or moved run took
    seen = training.get("trained_questions")
    if seen:  # the bitmap stays in training.json (reachlens elicit draws around it)
        runs.append(f"- trained on {seen['count']:,} of the {seen['n_split']:,} `{seen['task']}` {seen['split']} "
                    "questions (`trained_questions` in training.json)")
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
        *[f"- {k}: {v}" for k, v in hyper.items() if k not in ("seed", "wall_seconds", "parameters")], *runs, "",
    ]
    if training.get("prompt_format", "qa") != "qa":
        lines += [f"Its native prompt format is `{training['prompt_format']}`; the card measures every model under "
                  f"the shared `qa` prompt, and this one also under its own on `arith_hard` (the prompt-format "
                  "control).", ""]
    if lock is not None:
        lines += lock_markdown(lock)
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
    formats = [*([native] if native != "qa" else []), *training.get("card_formats", [])]
    keys = [*args.tasks, *(f"{t}@{f}" for t in args.tasks if t in FORMAT_CONTROL for f in formats)]
    for key in keys:
        audits[key] = measure(folder.name, key, Path(args.runs))
        print(f"{folder.name} on {key}: D={audits[key]['D']:.3f} O_64={audits[key]['O_K']:.3f}", flush=True)
    order = [*CARD_TASKS, *(f"{t}@{f}" for t in FORMAT_CONTROL for f in formats)]
    audits = {t: audits[t] for t in order if t in audits}
    card = {"audits": audits}
    if "lock" in training:
        card["lock"] = lock_summary(training["lock"], audits)
    card_path.write_text(json.dumps(card, indent=2, sort_keys=True) + "\n")
    write_markdown(folder, training, audits, card.get("lock"))
    print(f"wrote {folder / 'MODEL_CARD.md'}")


if __name__ == "__main__":
    main()
