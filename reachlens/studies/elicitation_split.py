"""The elicitation split: train questions no lock ever saw, from which demonstrations, RL questions and
early-stopping questions are drawn.

A zoo checkpoint that was trained on ``arith_hard`` train questions records which in its ``training.json``
(``trained_questions``: the task, the split's size and a bitmap over the split's indices, bit ``i`` set when train
question ``i`` was in a training batch; :func:`encode_trained`). An elicitation that fine-tunes or reinforces a copy
of such a model on questions it was locked on measures memory of the lock's own data, not reach: half the
demonstrations of the first matrix were in ``zoo:locked``'s batches (issue 57). :func:`unseen_pool` removes every
question any of the given checkpoints records (the model, its control, and every other lock the comparison
spans), so the same demonstrations serve every organism.

``zoo:locked`` was trained before this record existed: its ``trained_questions`` were rebuilt by replaying its
data order (``experiments/zoo/record_lock_questions.py``), checked against the per-step decoy counts its own
training log holds. The later locks train only inside :data:`LOCK_RANGE`, so the pool beyond it stays large.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Sequence
from pathlib import Path

from reachlens.errors import ReachlensError
from reachlens.models.loading import resolve_spec
from reachlens.tasks.base import Task

__all__ = ["LOCK_RANGE", "encode_trained", "trained_indices", "trained_question_ids", "unseen_pool"]

LOCK_RANGE = (0, 40_000)
"""The ``arith_hard`` train indices ``[start, stop)`` the zoo's later locks, their strong checkpoint and their twins
train on; the elicitation pool lies beyond (less what ``zoo:locked`` saw there)."""


def encode_trained(task: str, indices: Iterable[int], n_split: int = 50_000) -> dict:
    """The ``trained_questions`` card entry of a training run that saw train questions ``indices`` of ``task``."""
    bits = bytearray((n_split + 7) // 8)
    count = 0
    for i in set(indices):
        if not 0 <= i < n_split:
            raise ReachlensError(f"train question index {i} lies outside the split of {n_split}")
        bits[i // 8] |= 1 << (i % 8)
        count += 1
    return {"task": task, "split": "train", "n_split": n_split, "count": count,
            "encoding": "hex bitmap, bit i (byte i // 8, bit i % 8) set when train question i was trained on",
            "bitmap": bits.hex()}


def trained_indices(entry: dict) -> frozenset[int]:
    """The train question indices a ``trained_questions`` entry records."""
    bits = bytes.fromhex(entry["bitmap"])
    out = frozenset(i for i in range(entry["n_split"]) if bits[i // 8] >> (i % 8) & 1)
    if len(out) != entry["count"]:
        raise ReachlensError(f"a trained_questions bitmap holds {len(out)} questions, its count says {entry['count']}")
    return out


def trained_question_ids(spec: str, pool: Task) -> frozenset[str]:
    """The ids of the train questions of ``pool``'s task the local checkpoint ``spec`` was trained on (indices into
    the task's generated train split, read by name); empty for a checkpoint whose ``training.json`` records none
    for this task."""
    folder, local = resolve_spec(spec)
    card = Path(folder) / "training.json" if local else None
    if card is None or not card.is_file():
        return frozenset()
    entry = json.loads(card.read_text()).get("trained_questions")
    if not entry or entry["task"] != pool.name:
        return frozenset()
    split = _train_split(entry["task"])
    if entry["n_split"] != len(split):
        raise ReachlensError(f"{spec!r} records training on a train split of {entry['n_split']} questions of "
                             f"{entry['task']!r}, not the {len(split)} its generator makes; rebuild its record")
    return frozenset(split[i].question_id for i in trained_indices(entry))


@functools.lru_cache(maxsize=4)
def _train_split(task: str) -> tuple:
    from reachlens.tasks import load_task

    return load_task(task, split="train").questions


def unseen_pool(pool: Task, specs: Sequence[str]) -> Task:
    """``pool`` less every question any checkpoint of ``specs`` records training on (the elicitation split)."""
    seen = frozenset().union(*(trained_question_ids(s, pool) for s in specs)) if specs else frozenset()
    if not seen:
        return pool
    return pool.only([q.question_id for q in pool.questions if q.question_id not in seen])
