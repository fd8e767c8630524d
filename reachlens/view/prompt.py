"""A question's prompt as the model saw it, rebuilt from what its run records.

A run stores each question's id, gold and outputs, not its prompt: the prompt is the task's question under the
protocol's prompt format (a chat format through the model's own template, :func:`~reachlens.tasks.render_prompts`).
The viewer rebuilds it the way the decode did: the task from the record's data identity (a generated task from its
generator, seed and options; a task read from a file from that file, where it still is), the prompt rendered, then
encoded with the model's tokenizer as the engine encodes it (:func:`~reachlens.engine.tokens.encode_prompts`: one
BOS, a chat template's special tokens as tokens, a question's own text as text). The page shows the pieces, each
special token marked as one. Whatever cannot be rebuilt (a data file gone, a tokenizer that does not load) is one
line saying why, in place of the prompt.
"""

from __future__ import annotations

import functools
import threading
from pathlib import Path
from typing import Any

from reachlens.errors import ReachlensError

__all__ = ["PromptPiece", "prompt_pieces", "question_golds", "question_texts"]

PromptPiece = tuple[str, bool]
"""A piece of a prompt and whether it is one special token (BOS, a chat template's turn markers)."""

_LOCK = threading.Lock()


def _task(record) -> Any:
    """The task a run's record names (its questions and prompt formats)."""
    from reachlens.tasks import load_task, loader_name

    p, ident = record.protocol, record.data or {}
    if p is None:
        raise ReachlensError("the run records no protocol")
    name = ident.get("generator") or loader_name(p.task)
    path = ident.get("file")
    if path is not None and not Path(path).is_file():
        raise ReachlensError(f"the run was made on the data file {path!r}, which is not there now")
    return _load(name, path, p.split, int(ident.get("seed", 0)), tuple(sorted((ident.get("options") or {}).items())))


@functools.lru_cache(maxsize=8)
def _load(name: str, path: str | None, split: str, seed: int, options: tuple) -> Any:
    from reachlens.tasks import load_task

    kwargs = dict(options)
    return load_task(name, None if path is None else Path(path), split=split, seed=seed, **kwargs)


@functools.lru_cache(maxsize=8)
def _tokenizer(spec: str) -> Any:
    from reachlens.models import load_tokenizer

    return load_tokenizer(spec)


def question_texts(record) -> dict[str, str]:
    """Each question's text under the run's prompt format (the task's own template; a chat format's user turn),
    by question id: what the page searches and shows as the question. Empty when the task cannot be rebuilt."""
    from reachlens.protocol import chat_inner

    try:
        with _LOCK:
            task = _task(record)
        fmt = task.format(chat_inner(record.protocol.prompt_format) or record.protocol.prompt_format or None)
        return {q.question_id: fmt.render(q) for q in task.questions}
    except Exception:  # noqa: BLE001 - a question's text is a convenience; the page says when it is missing
        return {}


def question_golds(record) -> dict[str, str]:
    """Each question's gold answer as the run's task holds it, by question id (for a run whose tables do not keep
    it: a probe run, a routing run). Empty when the task cannot be rebuilt."""
    try:
        with _LOCK:
            task = _task(record)
        return {q.question_id: str(q.gold) for q in task.questions}
    except Exception:  # noqa: BLE001 - a convenience, as question_texts
        return {}


def prompt_pieces(record, question_id: str) -> list[PromptPiece]:
    """The prompt of ``question_id`` as the model saw it, as (text, is special token) pieces.

    Raises:
        ReachlensError: the task, the question or the model's tokenizer cannot be had again (the message says which).
    """
    from reachlens.engine.tokens import encode_prompts, special_ids
    from reachlens.tasks import render_prompts

    with _LOCK:
        task = _task(record)
        question = next((q for q in task.questions if q.question_id == question_id), None)
        if question is None:
            raise ReachlensError(f"question {question_id!r} is not in the task {task.name!r} as loaded now")
        spec = (record.model or {}).get("spec")
        try:
            tok = _tokenizer(spec)
        except Exception as err:  # noqa: BLE001 - any loader failure is one line on the page
            raise ReachlensError(f"the tokenizer of {spec!r} does not load here ({type(err).__name__})") from None
        prompt = render_prompts(task, record.protocol, [question], tok)[0]
        ids = encode_prompts(tok, [prompt])[0]
        special = set(special_ids(tok).values()) | {i for i in (tok.bos_token_id, tok.eos_token_id) if i is not None}
        return _pieces(tok, ids, special)


def _pieces(tok, ids: list[int], special: set[int]) -> list[PromptPiece]:
    out: list[PromptPiece] = []
    run: list[int] = []
    for i in ids:
        if i in special:
            if run:
                out.append((tok.decode(run, skip_special_tokens=False), False))
                run = []
            out.append((tok.convert_ids_to_tokens(i), True))
        else:
            run.append(i)
    if run:
        out.append((tok.decode(run, skip_special_tokens=False), False))
    return out
