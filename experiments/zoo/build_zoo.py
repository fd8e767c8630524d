"""Retrain the whole zoo from scratch with fixed seeds, then measure every model card.

    python experiments/zoo/build_zoo.py --zoo reachlens/assets/zoo        # what `make zoo` runs

The lineage is the paper's four-variant control plus a second RL loss:

    base                  pretrained on arith worked solutions ("qa" prompts), 25% with a plausible slip
    base -> grpo          RLVR, TRL GRPOTrainer, loss_type="grpo", reward = reachlens' numeric grader
    base -> dapo          the same with DAPO's loss (loss_type="dapo")
    base -> sft           TRL SFTTrainer on clean worked solutions in their own prompt format ("verbose":
                          the external traces SFT injects, with the format they come in)
    base -> sft -> sft-grpo   RLVR on top of SFT, in the SFT model's native ("verbose") format

Independent runs go two at a time, one torch thread each (two threads in one process were erratic on
this 2-core machine). Each step's command is the one recorded in its checkpoint's training.json.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RL = dict(steps=200, lr="1e-5", seed=0)
SFT = dict(steps=300, lr="3e-4", seed=0)


def commands(zoo: Path) -> list[list[tuple[str, list[str]]]]:
    """Stages of (name, argv); the runs of one stage are independent of each other."""
    py = [sys.executable]
    rl = lambda init, out, loss, fmt: py + [  # noqa: E731
        str(HERE / "rl_grpo.py"), "--init", str(zoo / init), "--out", str(zoo / out), "--loss-type", loss,
        "--steps", str(RL["steps"]), "--lr", RL["lr"], "--seed", str(RL["seed"]), "--prompt-format", fmt]
    sft = py + [str(HERE / "sft.py"), "--init", str(zoo / "base"), "--out", str(zoo / "sft"), "--steps",
                str(SFT["steps"]), "--lr", SFT["lr"], "--seed", str(SFT["seed"]), "--prompt-format", "verbose"]
    return [
        [("base", py + [str(HERE / "pretrain_base.py"), "--out", str(zoo / "base"), "--steps", "1200", "--seed", "0"])],
        [("grpo", rl("base", "grpo", "grpo", "qa")), ("sft", sft)],
        [("dapo", rl("base", "dapo", "dapo", "qa")), ("sft-grpo", rl("sft", "sft-grpo", "grpo", "verbose"))],
    ]


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
            shutil.rmtree(zoo / name, ignore_errors=True)
            log = open(logs / f"{name}.log", "w")
            print(f"[{time.perf_counter() - t0:6.0f}s] start {name}: {' '.join(cmd[1:])}", flush=True)
            procs.append((name, subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT), log))
        for name, p, log in procs:
            if p.wait() != 0:
                raise SystemExit(f"{name} failed (exit {p.returncode}); see {log.name}")
            log.close()
            built.append(name)
            print(f"[{time.perf_counter() - t0:6.0f}s] done {name}", flush=True)
    if not args.skip_cards:
        for name in built:
            subprocess.run([sys.executable, str(HERE / "make_card.py"), str(zoo / name)], check=True)
    print(f"zoo built in {time.perf_counter() - t0:.0f}s: {', '.join(built)}")


if __name__ == "__main__":
    main()
