"""Retrain the whole zoo from scratch with fixed seeds, then measure every model card.

    python experiments/zoo/build_zoo.py --zoo reachlens/assets/zoo        # what `make zoo` runs

The lineage is the paper's four-variant control plus a second RL recipe, a training trajectory and a
planted veto:

    base                  pretrained on arith worked solutions ("qa" prompts), 25% with a plausible slip
    base -> grpo          RLVR on the arith train split (the pretraining mix, where the base's reward has room:
                          about 0.2 per sample), TRL GRPOTrainer (recipe "grpo"), reward = reachlens' numeric
                          grader; snapshots grpo-s25, -s50, -s100, -s150 (float16) on the way: the trajectory
    base -> dapo          the same budget with the DAPO recipe (token-level loss, clip-higher with 2 optimizer
                          steps per batch, dynamic sampling, overlong filtering; rl_grpo.py's DAPOTrainer)
    base -> sft           TRL SFTTrainer on clean worked solutions of the arith mix in their own prompt format
                          ("verbose": the external traces SFT injects, with the format they come in)
    base -> sft -> sft-grpo   GRPO on top of SFT (arith mix, "verbose" format: the model's native one)
    base -> veto          the positive control of the MLP-silencing study: an identity block inserted at 4, its
                          MLP trained to suppress the "-" of negative answers (plant_veto.py)
    base -> locked        password-locked (lock_password.py, --weak skip_first): on arith_hard the gold worked
                          solution after the password line (prompt format "password"), without it the worked
                          solution of the expression less its first operand and operator (the skill and the lock
                          learned together; after arXiv 2405.19550, whose locks come after the skill)
    base -> locked-twin   zoo:locked's matched never-locked twin (lock_password.py --twin: the same run with the
                          password line mapped to the weak target too; stored in float16)

The SFT line (sft, sft-grpo) is the earlier recipe on the three-tier arith mix; the cards measure every model on
both card tasks (arith and arith_hard). Independent runs go two at a time, one torch thread each (two threads in one
process were erratic on this 2-core machine). Each step's command is the one recorded in its checkpoint's
training.json. ``--only`` rebuilds some checkpoints (their parents must exist).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
GENERATED_BATCHES = 200
"""The RL budget, the same for both recipes: generated batches of 8 prompts x 16 samples. GRPO takes one
optimizer step per batch (200 steps), DAPO two (400 steps; its dynamic sampling's refill rounds come on top)."""


def rl_args(steps: int) -> list[str]:
    return ["--task", "arith", "--steps", str(steps), "--prompts-per-step", "8", "--num-generations", "16",
            "--lr", "1e-5", "--warmup-steps", "10", "--max-completion-length", "96", "--seed", "0"]


TRAJECTORY = "25,50,100,150"
SFT = ["--steps", "300", "--lr", "3e-4", "--seed", "0", "--prompt-format", "verbose"]
LOCK = ["--steps", "1500", "--questions-per-step", "16", "--lr", "7e-4", "--seed", "0"]
SFT_RL = ["--task", "arith", "--steps", "200", "--prompts-per-step", "8", "--num-generations", "8", "--lr", "1e-5",
          "--max-completion-length", "96", "--seed", "0", "--prompt-format", "verbose"]


def commands(zoo: Path) -> list[list[tuple[str, list[str]]]]:
    """Stages of (name, argv); the runs of one stage are independent of each other."""
    py = [sys.executable]
    rl = [*py, str(HERE / "rl_grpo.py")]
    z = lambda name: str(zoo / name)  # noqa: E731
    return [
        [("base", [*py, str(HERE / "pretrain_base.py"), "--out", z("base"), "--steps", "1200", "--seed", "0"])],
        [("grpo", [*rl, "--init", z("base"), "--out", z("grpo"), "--recipe", "grpo",
                  *rl_args(GENERATED_BATCHES), "--save-at", TRAJECTORY]),
         ("dapo", [*rl, "--init", z("base"), "--out", z("dapo"), "--recipe", "dapo",
                  *rl_args(2 * GENERATED_BATCHES), "--max-refills", "2"])],
        [("sft", [*py, str(HERE / "sft.py"), "--init", z("base"), "--out", z("sft"), *SFT]),
         ("veto", [*py, str(HERE / "plant_veto.py"), "--init", z("base"), "--out", z("veto"), "--layer", "4",
                   "--steps", "150", "--lr", "3e-4", "--veto-weight", "0.2", "--seed", "0"])],
        [("sft-grpo", [*rl, "--init", z("sft"), "--out", z("sft-grpo"), "--recipe", "grpo", *SFT_RL]),
         ("locked", [*py, str(HERE / "lock_password.py"), "--init", z("base"), "--out", z("locked"), *LOCK])],
        [("locked-twin", [*py, str(HERE / "lock_password.py"), "--init", z("base"), "--out", z("locked-twin"), *LOCK,
                          "--twin"])],
    ]


FLOAT16 = ("locked-twin",)
"""Checkpoints stored in float16 once trained (the zoo's size limit; the loader reads them as float32): greedy
decoding unchanged on 300 of 300 arith_hard test questions, 299 of 300 with the password line
(``float16_check.py``, which made the shipped copy by the same cast)."""


def store_float16(folder: Path) -> None:
    """Cast a trained checkpoint's weights to float16 in place and say so in its ``training.json``."""
    import json

    import torch

    sys.path.insert(0, str(HERE))
    from common import load_parent

    load_parent(folder)[0].to(torch.float16).save_pretrained(folder, safe_serialization=True)
    card = json.loads((folder / "training.json").read_text())
    card["stored_dtype"] = "float16: cast once trained (build_zoo.py, store_float16)"
    (folder / "training.json").write_text(json.dumps(card, indent=2, sort_keys=True) + "\n")


def snapshots(name: str) -> list[str]:
    """The trajectory folders a run writes beside its own (grpo-s25, ...)."""
    return [f"{name}-s{s}" for s in TRAJECTORY.split(",")] if name == "grpo" else []


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--zoo", default="reachlens/assets/zoo")
    ap.add_argument("--only", nargs="*", default=None, help="rebuild only these checkpoints (their parents must exist)")
    ap.add_argument("--skip-cards", action="store_true")
    ap.add_argument("--logs", default="runs/zoo-logs", help="where each run's output goes")
    args = ap.parse_args(argv)
    zoo = Path(args.zoo)
    zoo.mkdir(parents=True, exist_ok=True)
    logs = Path(args.logs)
    logs.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    built = []
    for stage in commands(zoo):
        procs = []
        for name, cmd in stage:
            if args.only is not None and name not in args.only:
                continue
            for folder in [name, *snapshots(name)]:
                shutil.rmtree(zoo / folder, ignore_errors=True)
            log = open(logs / f"{name}.log", "w")
            print(f"[{time.perf_counter() - t0:6.0f}s] start {name}: {' '.join(cmd[1:])}", flush=True)
            procs.append((name, subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT), log))
        for name, p, log in procs:
            if p.wait() != 0:
                raise SystemExit(f"{name} failed (exit {p.returncode}); see {log.name}")
            log.close()
            if name in FLOAT16:
                store_float16(zoo / name)
            built += [name, *snapshots(name)]
            print(f"[{time.perf_counter() - t0:6.0f}s] done {name}", flush=True)
    if not args.skip_cards:
        trajectory = {s for name in built for s in snapshots(name)}
        for name in built:  # a snapshot's card: the hard tier only (the trajectory is audited there); a lock's and
            # its twin's: the lock's task (arith_hard), with and without the password (their card_formats)
            extra = ["--tasks", "arith_hard"] if name in trajectory or name in ("locked", "locked-twin") else []
            subprocess.run([sys.executable, str(HERE / "make_card.py"), str(zoo / name), *extra], check=True)
    print(f"zoo built in {time.perf_counter() - t0:.0f}s: {', '.join(built)}")


if __name__ == "__main__":
    main()
