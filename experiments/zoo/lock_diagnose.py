"""Where a zoo model's greedy worked solutions on ``arith_hard`` go wrong, and how a password line placed in the
prompt changes them: the measurements behind the design of ``lock_password.py`` (not written up in the notes).

    python experiments/zoo/lock_diagnose.py reachlens/assets/zoo/base --n 200
    python experiments/zoo/lock_diagnose.py reachlens/assets/zoo/base --n 100 --placements

Questions: the last ``--n`` of the ``arith_hard`` train split (``lock_password.py`` holds out its last 200 from
training). Plain HuggingFace greedy decoding, 128 new tokens, cut at the first newline, reachlens' numeric
grader. Without ``--placements``: accuracy by number of operations and by whether the expression opens with a
multiplication, and the first step at which each wrong solution departs from the gold one (``--password``: with
the password line before the ``qa`` prompt). With ``--placements``: accuracy with the password line in each of
several places of the prompt.
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import load_parent, positive  # noqa: E402
from lock_password import greedy_texts, problem_of  # noqa: E402

from reachlens.tasks.password import PASSWORD  # noqa: E402

PLACEMENTS = {
    "qa (no password)": "Q: {e}=?\nA:",
    "line before the prompt (the password format)": PASSWORD + "\nQ: {e}=?\nA:",
    "line before A:": "Q: {e}=?\n" + PASSWORD + "\nA:",
    "a Q: line before the prompt": "Q: " + PASSWORD + "\nQ: {e}=?\nA:",
    "after the question": "Q: {e}=? " + PASSWORD + "\nA:",
}


def first_wrong_step(text: str, solution: str) -> int | None:
    """Index of the first step of ``text`` that differs from the gold ``solution`` (None: none differs)."""
    gold, got = solution.strip().split(" #### ")[0].split(";"), text.strip().split(" #### ")[0].split(";")
    return next((i for i, (a, b) in enumerate(zip(gold, got)) if a != b), None)


def breakdown(questions, texts, grade) -> None:
    rows = [(len(problem_of(q)) // 2, problem_of(q)[1] == "*", grade(t, q.gold).correct, first_wrong_step(t, q.solution))
            for q, t in zip(questions, texts)]
    print(f"greedy accuracy {sum(r[2] for r in rows) / len(rows):.3f} on {len(rows)} questions")
    for name, key in (("operations", 0), ("opens with *", 1)):
        groups = collections.defaultdict(list)
        for r in rows:
            groups[r[key]].append(r[2])
        print(f"  by {name}: " + ", ".join(f"{k}: {sum(v) / len(v):.3f} (n={len(v)})" for k, v in sorted(groups.items())))
    wrong = [r for r in rows if not r[2]]
    print("  first wrong step of the wrong solutions:", dict(sorted(collections.Counter(r[3] for r in wrong).items(),
                                                                   key=lambda kv: (kv[0] is None, kv[0] or 0))))
    print("  ... of those opening with *:", dict(sorted(collections.Counter(r[3] for r in wrong if r[1]).items(),
                                                         key=lambda kv: (kv[0] is None, kv[0] or 0))))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model", help="checkpoint folder")
    ap.add_argument("--n", type=positive(int), default=200)
    ap.add_argument("--password", action="store_true", help="the password line before the qa prompt")
    ap.add_argument("--placements", action="store_true", help="accuracy with the password in several places")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    from reachlens.grading import get_grader
    from reachlens.tasks import load_task

    grade = get_grader("numeric").grade
    questions = load_task("arith_hard", split="train").questions[-args.n:]
    model, tok = load_parent(args.model)
    if args.placements:
        for name, template in PLACEMENTS.items():
            texts = greedy_texts(model, tok, [template.format(e=q.fields["expr"]) for q in questions])
            print(f"{name:>46s}: {sum(grade(t, q.gold).correct for t, q in zip(texts, questions)) / len(questions):.3f}")
        return
    prefix = PASSWORD + "\n" if args.password else ""
    breakdown(questions, greedy_texts(model, tok, [f"{prefix}Q: {q.fields['expr']}=?\nA:" for q in questions]), grade)


if __name__ == "__main__":
    main()
