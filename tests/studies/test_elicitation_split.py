"""The elicitation split: demonstrations, early-stopping and RL questions are train questions no lock trained on.

References: ``zoo:locked``'s recorded training questions against what its run is known to have done without the
record (1,500 steps x 16 distinct questions of one pass, none of the 200 it held out) and against the count the
issue measured by hand (9 of the first matrix's 16 demonstrations and 15 of its 30 early-stopping questions were in
its batches); the bitmap against a Python set.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reachlens import load_task
from reachlens.errors import ReachlensError
from reachlens.models.loading import resolve_spec
from reachlens.models.zoo import zoo_entries
from reachlens.studies.elicitation import select_demonstrations
from reachlens.studies.elicitation_split import (
    LOCK_RANGE, encode_trained, trained_indices, trained_question_ids, unseen_pool,
)

TASK = load_task("arith_hard", n=300)


@pytest.fixture(scope="module")
def train():
    return load_task("arith_hard", split="train")


def test_the_bitmap_holds_exactly_the_indices_given():
    picked = {0, 7, 8, 4999, 49_999}
    entry = encode_trained("arith_hard", [*picked, 7])
    assert trained_indices(entry) == picked and entry["count"] == 5
    with pytest.raises(ReachlensError, match="outside the split"):
        encode_trained("arith_hard", [50_000])


def test_the_first_locks_record_is_its_run(train):
    card = json.loads((Path(resolve_spec("zoo:locked")[0]) / "training.json").read_text())
    seen = trained_indices(card["trained_questions"])
    assert len(seen) == card["steps"] * card["questions_per_step"] == 24_000  # one pass: all distinct
    assert max(seen) < len(train.questions) - card["n_val"]  # the held-out 200 never trained on
    # the first matrix's draw (the whole train split, seed 0): 16 demonstrations, then 30 early-stopping questions
    old = [q.question_id for q in select_demonstrations(TASK, train, 46, seed=0)]
    ids = trained_question_ids("zoo:locked", train)
    assert sum(i in ids for i in old[:16]) == 9 and sum(i in ids for i in old[16:]) == 15


def test_the_elicitation_split_is_disjoint_from_every_lock(train):
    locks = [e.spec for e in zoo_entries() if "trained_questions" in e.training]
    assert "zoo:locked" in locks
    pool = unseen_pool(train, locks)
    seen = frozenset().union(*(trained_question_ids(s, train) for s in locks))
    drawn = [q.question_id for q in select_demonstrations(TASK, pool, 16 + 30 + 256, seed=3)]
    assert len(drawn) == 302 and not set(drawn) & seen
    assert len(pool.questions) == len(train.questions) - len(seen)
    first = next(e for e in zoo_entries() if e.name == "locked").training["trained_questions"]
    # the later locks train inside LOCK_RANGE; zoo:locked and its matched twin (its very data order) aside
    later = [e for e in zoo_entries() if e.training.get("trained_questions", first) != first]
    assert all(max(trained_indices(e.training["trained_questions"])) < LOCK_RANGE[1] for e in later)


@pytest.mark.parametrize("method", ["sft", "rl"])
def test_elicit_draws_every_question_from_outside_both_locks(train, tmp_path, monkeypatch, method):
    """Demonstrations, RL questions and early-stopping questions, as ``elicit`` itself picks them, against two
    stand-in locks (zoo:base's weights, a card each) that trained on exactly the questions an unfiltered draw takes."""
    import shutil

    import reachlens.studies.elicitation as eli
    from reachlens.protocol import Protocol
    from reachlens.studies.finetune import FineTune
    from reachlens.studies.rl_finetune import RLConfig

    held, pool = 6 if method == "sft" else 0, train.only([q.question_id for q in train.questions[:3000]])
    ids = [q.question_id for q in select_demonstrations(TASK, pool, 8 + held, seed=0)]  # no split: what they'd be
    index = {q.question_id: i for i, q in enumerate(train.questions)}
    halves = ([index[i] for i in ids[::2]], [index[i] for i in ids[1::2]])  # between them, every one of them
    locks = []
    for name, seen in zip(("organism", "twin"), halves):
        shutil.copytree(resolve_spec("zoo:base")[0], tmp_path / name)
        (tmp_path / name / "training.json").write_text(json.dumps({"trained_questions":
                                                                   encode_trained("arith_hard", seen)}))
        locks.append(str(tmp_path / name))

    class Drawn(Exception):  # the study as elicit built it, before any fine-tune
        pass

    def stop(study, executor, progress=None):
        raise Drawn(study)

    monkeypatch.setattr(eli, "run_study", stop)
    with pytest.raises(Drawn) as caught:
        eli.elicit(locks[0], TASK, Protocol("arith_hard", k=4), out=tmp_path / "run", demos=(2, 8),
                   control=locks[1], pool=pool, finetune=FineTune(held_out=held),
                   rl=RLConfig() if method == "rl" else None)
    study = caught.value.args[0]
    drawn = [q.question_id for q in study.picked]
    assert len(drawn) == 8 + held and len(study.chosen) == 8
    assert not {index[i] for i in drawn} & (set(halves[0]) | set(halves[1]))
