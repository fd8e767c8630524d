"""Record which ``arith_hard`` train questions ``zoo:locked`` was trained on, by replaying its data order.

    python experiments/zoo/record_lock_questions.py reachlens/assets/zoo/locked

``lock_password.py`` draws its batches from one seeded shuffled order of the train split less its last ``n_val``
questions, and the same random stream decides each locked prompt's decoy line; it predates the
``trained_questions`` card entry. This replays that stream with the checkpoint's own recorded settings (steps,
questions per step, seed, decoy rate, weak policy) through ``lock_password.make_batch`` itself, checks the replay
against what the run logged while it trained (the number of decoy prompts at every logged step of ``loss_log``),
and writes the entry (:func:`reachlens.studies.elicitation_split.encode_trained`) into its ``training.json``. Any
difference in the stream would show in the decoy counts, which consume the same random numbers.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import next_batch  # noqa: E402
from lock_password import make_batch  # noqa: E402

from reachlens.studies.elicitation_split import encode_trained  # noqa: E402


def replay(train: dict, questions) -> tuple[set[int], dict[int, int]]:
    """(train indices seen, decoys per step) of a ``lock_password.py`` run with the card ``train``."""
    train_qs = questions[: len(questions) - train["n_val"]]
    st, decoys = {"order": [], "rng": random.Random(f"lock/{train['seed']}/data"), "seen": set()}, {}
    for step in range(train["steps"]):
        batch = next_batch(st, train_qs, train["questions_per_step"])
        decoys[step] = make_batch(batch, st["rng"], train["lock"]["decoy_rate"], train["lock"]["weak"])[2]
    return st["seen"], decoys


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("folder", help="a lock_password.py checkpoint folder (reachlens/assets/zoo/locked)")
    args = ap.parse_args(argv)
    from reachlens.tasks import load_task

    path = Path(args.folder) / "training.json"
    train = json.loads(path.read_text())
    task = train["lock"]["task"]
    questions = load_task(task, split="train").questions
    seen, decoys = replay(train, questions)
    bad = [row["step"] for row in train["loss_log"] if decoys[row["step"]] != row["decoys"]]
    if bad:
        raise SystemExit(f"the replay's decoy counts differ from the training log at steps {bad[:5]}: not this run")
    train["trained_questions"] = encode_trained(task, seen, len(questions))
    path.write_text(json.dumps(train, indent=2, sort_keys=True) + "\n")
    print(f"{path}: {len(seen):,} train questions recorded; the replay matches the {len(train['loss_log'])} logged "
          "decoy counts")


if __name__ == "__main__":
    main()
