"""Decode questions and grade them: the one path from a question to its graded deployment and samples.

Every study that decodes goes through here: the audit (the deployment and K samples per question,
:func:`audit_slice`), recognition's generation side and every causal condition (the deployment alone,
:func:`deploy_and_grade`). A completion is graded in one place (:func:`grade_completion`), so
``realized`` means the same thing in every table.

The deployment is the greedy decode of the protocol's prompt; sample j of question q is drawn with the seed
``row_seed(seed, q, sample_offset + j)`` and depends on nothing else, so a question decodes the same rows
in any batch, process or executor. Hooks the caller attached to the model are live on every step.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Hashable, Sequence, Set
from pathlib import Path
from typing import Any

import pandas as pd

from reachlens.engine import Completion, Row, encode, row_seed, tokenizer_of
from reachlens.engine.backends import generate_rows
from reachlens.errors import ReachlensError, UnknownNameError
from reachlens.execution import ExecConfig
from reachlens.grading import question_grader
from reachlens.protocol import Protocol
from reachlens.records import GENERATION_COLUMNS, QUESTION_COLUMNS, SAMPLE_COLUMNS, canonical
from reachlens.tasks.base import Question, Task
from reachlens.tasks.chat import render_prompts

__all__ = ["audit_slice", "batch_slices", "check_budget", "check_context", "check_rows", "decode_rows",
           "deploy_and_grade", "deploy_arms_and_grade", "grade_completion", "grade_questions", "grade_samples",
           "machine_memory", "questions_by_id", "sample_slice"]

ROW_BYTES = 1024
"""Memory one completion holds while its batch is decoded and graded, before its tokens: its row, its
``Completion``, its grade and its row of the sample table (about 1 KiB, measured with ``tracemalloc``)."""
ROW_BYTES_PER_TOKEN = 64
"""Memory per generated token of a completion: its id and log-probability as Python objects and its
text (about 64 bytes, measured with ``tracemalloc``)."""
CHARS_PER_TOKEN_MARGIN = 4
"""Slack on "a token spans at most as many characters as the tokenizer's longest vocabulary entry":
a normalizer can merge characters (NFC composes one Hangul syllable from three jamo)."""


def grade_completion(grader, question: Question, completion: Completion) -> dict[str, Any]:
    """``answer``, ``correct`` and ``scored`` of one completion (a grader that cannot decide: not scored,
    never correct)."""
    g = grader.grade(completion.text, question.gold)
    return {"answer": g.answer, "correct": bool(g.correct and g.scored), "scored": bool(g.scored)}


def _deployed(grader, question: Question, completion: Completion) -> dict[str, Any]:
    g = grade_completion(grader, question, completion)
    return {"question_id": question.question_id, "deployed_text": completion.text, "deployed_answer": g["answer"],
            "realized": g["correct"], "deployed_scored": g["scored"], "deployed_finish": completion.finish_reason}


def grade_samples(protocol: Protocol, questions: Sequence[Question], samples: Sequence[Sequence[Completion]],
                  sample_offset: int = 0) -> pd.DataFrame:
    """Grade each question's samples into candidate rows (:data:`~reachlens.records.SAMPLE_COLUMNS`; sample j of
    question i is candidate ``sample_offset + j``)."""
    rows = []
    for q, outs in zip(questions, samples):
        grader = question_grader(str(protocol.grader), q)
        graded: dict[str, dict[str, Any]] = {}  # a grade depends on the text and the question only: once per text
        for j, o in enumerate(outs):
            grade = graded.get(o.text)
            if grade is None:
                grade = graded[o.text] = grade_completion(grader, q, o)
            rows.append({"question_id": q.question_id, "candidate_idx": sample_offset + j, "text": o.text,
                         **grade, "finish_reason": o.finish_reason,
                         "n_tokens": len(o.token_ids), "mean_logprob": o.mean_logprob})
    return canonical(pd.DataFrame(rows, columns=SAMPLE_COLUMNS))


def grade_questions(
    protocol: Protocol, questions: Sequence[Question], deployed: Sequence[Completion],
    samples: Sequence[Sequence[Completion]], sample_offset: int = 0,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Grade completions into an audit's question and sample tables (no model needed)."""
    s_df = grade_samples(protocol, questions, samples, sample_offset)
    good = s_df.groupby("question_id")["correct"].sum() if len(s_df) else pd.Series(dtype=int)
    graded = s_df.groupby("question_id")["scored"].sum() if len(s_df) else pd.Series(dtype=int)
    q_rows = []
    for q, dep in zip(questions, deployed):
        deployment = _deployed(question_grader(str(protocol.grader), q), q, dep)
        n_correct, n_scored = int(good.get(q.question_id, 0)), int(graded.get(q.question_id, 0))
        q_rows.append({**deployment, "reachable": n_correct > 0, "n_correct": n_correct,
                       "n_scored": n_scored, "k": protocol.k, "propensity": n_correct / n_scored if n_scored else math.nan,
                       "gold": q.gold, "labels": "".join(q.labels) if q.labels is not None else None})
    return canonical(pd.DataFrame(q_rows, columns=QUESTION_COLUMNS)), s_df


def decode_rows(
    model, task: Task, protocol: Protocol, questions: Sequence[Question], extra: Sequence[Sequence[tuple[Any, ...]]],
    exec_config: ExecConfig,
) -> tuple[list[Completion], list[list[Completion]]]:
    """Each question's deployment (greedy, the plain model) and its ``extra`` rows, decoded together in one
    engine call: ``extra[i]`` lists question i's rows as ``(seed, arm, index)`` (seed None: greedy; arm None:
    the plain model; tag ``(question_id, index)``). The audit's samples and a probe's arms
    (:mod:`reachlens.probes`) are both such rows; hooks the caller attached are live."""
    rows: list[Row] = []
    for i, (q, mine) in enumerate(zip(questions, extra, strict=True)):
        rows.append(Row(i, None, tag=(q.question_id, None)))
        rows += [Row(i, seed, tag=(q.question_id, index), arm=arm) for seed, arm, index in mine]
    outs = generate_rows(model, render_prompts(task, protocol, questions, getattr(model, "tokenizer", None)), rows, protocol,
                         max_batch_rows=exec_config.max_batch_rows, share_prefixes=exec_config.share_prefixes)
    deployed, rest, at = [], [], 0
    for mine in extra:
        deployed.append(outs[at])
        rest.append(outs[at + 1 : at + 1 + len(mine)])
        at += 1 + len(mine)
    return deployed, rest


def _decode(
    model, task: Task, protocol: Protocol, questions: Sequence[Question], exec_config: ExecConfig, *,
    k: int, sample_offset: int = 0, arms: Sequence[Hashable] | None = None, deploy: bool = True,
) -> tuple[list[Completion], list[list[Completion]]]:
    """Each question's deployment (greedy; none when ``deploy`` is False) and its ``k`` samples, decoded together.

    ``arms``: per entry of ``questions``, the arm its rows run (``Row.arm``; None: the plain model, as
    when ``arms`` is None). A question may repeat under different arms: its prompt is rendered once,
    and its arms are roots of one sample tree (prefilled in one batched forward)."""
    per_q = k + deploy
    index: dict[str, int] = {}  # each distinct question's prompt
    unique: list[Question] = []
    for q in questions:
        if q.question_id not in index:
            index[q.question_id] = len(unique)
            unique.append(q)
    rows: list[Row] = []
    for q, arm in zip(questions, [None] * len(questions) if arms is None else arms):
        i = index[q.question_id]
        if deploy:
            rows.append(Row(i, None, tag=(q.question_id, None), arm=arm))
        for j in range(k):
            # temperature 0 (allowed with k=1 only) makes the one sample greedy too
            seed = row_seed(protocol.seed, q.question_id, sample_offset + j) if protocol.temperature > 0 else None
            rows.append(Row(i, seed, tag=(q.question_id, sample_offset + j), arm=arm))
    outs = generate_rows(model, render_prompts(task, protocol, unique, getattr(model, "tokenizer", None)), rows, protocol,
                         max_batch_rows=exec_config.max_batch_rows, share_prefixes=exec_config.share_prefixes)
    return ([outs[i * per_q] for i in range(len(questions))] if deploy else [],
            [outs[i * per_q + deploy : (i + 1) * per_q] for i in range(len(questions))])


def questions_by_id(task: Task, ids: Sequence[str] | None) -> list[Question]:
    """The questions of ``task`` with ``ids``, in that order (all when None); an unknown id is refused."""
    if ids is None:
        return list(task.questions)
    by_id = {q.question_id: q for q in task.questions}
    missing = [i for i in ids if i not in by_id]
    if missing:
        raise UnknownNameError(f"question ids {missing[:5]!r} are not in task {task.name!r} ({len(missing)} missing)")
    return [by_id[i] for i in ids]


def deploy_and_grade(
    model, task: Task, protocol: Protocol, question_ids: Sequence[str] | None = None,
    exec_config: ExecConfig | None = None,
) -> pd.DataFrame:
    """The deployment (greedy) of the chosen questions, graded: :data:`~reachlens.records.GENERATION_COLUMNS`,
    in the order of ``question_ids`` (all questions when None). ``protocol`` is resolved and greedy."""
    ids = [q.question_id for q in questions_by_id(task, question_ids)]
    return deploy_arms_and_grade(model, task, protocol, [(None, ids)], exec_config)[0]


def deploy_arms_and_grade(
    model, task: Task, protocol: Protocol, plan: Sequence[tuple[Hashable, Sequence[str]]],
    exec_config: ExecConfig | None = None,
) -> list[pd.DataFrame]:
    """The graded deployments of many arms in one decode: per ``(arm, question_ids)`` of ``plan``, the
    table :func:`deploy_and_grade` gives for those questions with that arm's hooks alone attached.

    Every arm's rows (``Row.arm``; None: the plain model) decode side by side in one
    :func:`~reachlens.engine.generate` call, each question's prompt rendered once and prefilled once per
    arm; the per-arm hooks (``arm=`` of :mod:`reachlens.interventions`) must be attached by the caller.
    Rows never share an entry across arms, so each arm decodes what it would alone (up to the float32
    rounding of a different batch composition, see :mod:`reachlens.engine.generate`).

    >>> with model.hooks(fwd_hooks=zero_ablation(model, 3, "mlp", arm="L3")):  # doctest: +SKIP
    ...     plain, ablated = deploy_arms_and_grade(model, task, protocol, [(None, ids), ("L3", ids)])
    """
    questions, arms, spans = [], [], []
    for arm, ids in plan:
        chosen = questions_by_id(task, ids)
        spans.append((len(questions), len(questions) + len(chosen)))
        questions += chosen
        arms += [arm] * len(chosen)
    deployed: list[Completion] = []
    if questions:
        deployed, _ = _decode(model, task, protocol, questions, exec_config or ExecConfig(max_batch_rows=256), k=0,
                              arms=arms)
    rows = [_deployed(question_grader(str(protocol.grader), q), q, d) for q, d in zip(questions, deployed)]
    return [pd.DataFrame(rows[a:b], columns=GENERATION_COLUMNS) for a, b in spans]


def batch_slices(task: Task, protocol: Protocol, max_batch_rows: int, done: Set[str] = frozenset()) -> list[tuple[int, int]]:
    """The fixed slices ``(start, stop)`` of ``task`` decoded together, less those wholly in ``done``.

    A slice holds ``max_batch_rows // (K + 1)`` questions (at least one), counted from the task's
    first question whatever is done already. So a resumed run, and every executor, decodes exactly
    the batches an uninterrupted single-process run would have: same shapes, same numbers, bit for bit.
    """
    group = max(1, max_batch_rows // (protocol.k + 1))
    slices = [(start, min(start + group, len(task))) for start in range(0, len(task), group)]
    return [(a, b) for a, b in slices if any(q.question_id not in done for q in task.questions[a:b])]


def audit_slice(
    model, task: Task, protocol: Protocol, start: int, stop: int, exec_config: ExecConfig, *, sample_offset: int = 0,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Decode and grade the questions ``task.questions[start:stop]`` (one slice of :func:`batch_slices`): their
    question and sample tables (samples ``sample_offset`` .. ``sample_offset + K - 1``). ``protocol`` is resolved."""
    batch = list(task.questions[start:stop])
    deployed, samples = _decode(model, task, protocol, batch, exec_config, k=protocol.k, sample_offset=sample_offset)
    return grade_questions(protocol, batch, deployed, samples, sample_offset)


def sample_slice(
    model, task: Task, protocol: Protocol, start: int, stop: int, exec_config: ExecConfig, *, sample_offset: int = 0,
) -> pd.DataFrame:
    """The K samples alone of the questions ``task.questions[start:stop]``, graded (the sample table
    :func:`audit_slice` gives, without decoding the deployment): a probe's samples (:mod:`reachlens.probes`)."""
    batch = list(task.questions[start:stop])
    _, samples = _decode(model, task, protocol, batch, exec_config, k=protocol.k, sample_offset=sample_offset,
                         deploy=False)
    return grade_samples(protocol, batch, samples, sample_offset)


def machine_memory(*, proc: Path = Path("/proc/self"), cgroups: Path = Path("/sys/fs/cgroup")) -> int:
    """Bytes of memory this process may use: the smallest of the machine's physical memory, the limit of its
    own cgroup and of every cgroup above it (v2 ``memory.max``; v1 ``memory.limit_in_bytes``, nested ones
    included) and the address space its ``RLIMIT_AS`` (``ulimit -v``) leaves it beyond what it maps already.

    >>> machine_memory() > 0
    True
    """
    total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return min([total, *_cgroup_limits(proc, cgroups), *_address_space_left(proc)])


def _cgroup_limits(proc: Path, cgroups: Path) -> list[int]:
    """The memory limits of this process's cgroup and its ancestors, v2 and v1 (``/proc/self/cgroup``'s paths
    under ``cgroups``); none where there is no limit or nothing can be read."""
    try:
        lines = (proc / "cgroup").read_text().splitlines()
    except OSError:
        return []
    limits = []
    for line in lines:
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if controllers == "":  # v2: one unified hierarchy
            folder, name = cgroups, "memory.max"
        elif "memory" in controllers.split(","):  # v1: the memory controller's own hierarchy
            folder, name = cgroups / "memory", "memory.limit_in_bytes"
        else:
            continue
        parts = [q for q in path.split("/") if q not in ("", ".", "..")]
        for depth in range(len(parts) + 1):  # the root, then each cgroup down to this process's own
            try:
                value = (folder.joinpath(*parts[:depth]) / name).read_text().strip()
            except OSError:
                continue
            if value.isdigit():
                limits.append(int(value))
    return limits


def _address_space_left(proc: Path) -> list[int]:
    """The address space ``RLIMIT_AS`` leaves beyond what this process maps now (none when unlimited)."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return []
    try:
        mapped = int((proc / "statm").read_text().split()[0]) * resource.getpagesize()
    except (OSError, ValueError, IndexError):
        mapped = 0
    return [max(soft - mapped, 0)]


def _gib(n: int) -> str:
    return f"{n / (1 << 30):.1f} GiB"


def check_budget(protocol: Protocol, max_batch_rows: int) -> None:
    """Refuse a budget whose completions cannot fit in memory, before any is built.

    A slice of the audit (:func:`batch_slices`) holds ``max(K + 1, max_batch_rows)`` completions at
    most until it is graded (:func:`check_rows`). The message names the largest ``k`` (or ``max_batch_rows``) that
    fits. The decode itself runs ``max_batch_rows`` rows at a time, whatever K is.
    """
    if isinstance(max_batch_rows, bool) or not isinstance(max_batch_rows, int) or max_batch_rows < 1:
        raise ReachlensError(f"max_batch_rows={max_batch_rows!r} must be an integer >= 1")
    check_rows(protocol.k + 1, protocol.max_new_tokens, f"k={protocol.k}: one question's",
               lambda fit: f"use k <= {max(fit - 1, 0)}, or a shorter max_new_tokens")
    check_rows(max_batch_rows, protocol.max_new_tokens, f"max_batch_rows={max_batch_rows}: a batch of",
               lambda fit: f"use max_batch_rows <= {fit}")


def check_rows(rows: int, max_new_tokens: int, what: str, fix: Callable[[int], str]) -> None:
    """Refuse ``rows`` completions held together until they are graded when they cannot fit in memory, before any
    is built: each holds about :data:`ROW_BYTES` + :data:`ROW_BYTES_PER_TOKEN` per token of ``max_new_tokens``, and
    together they must stay under half of :func:`machine_memory` (the model, its cache and the finished tables need
    the rest). ``what`` names the rows in the message, ``fix(fit)`` says how to fit (``fit``: the most that do).

    >>> check_rows(10, 16, "ten rows:", lambda fit: f"use at most {fit}")
    """
    per_row = ROW_BYTES + ROW_BYTES_PER_TOKEN * max_new_tokens
    memory = machine_memory()
    fit = memory // 2 // per_row
    if rows > fit:
        raise ReachlensError(
            f"{what} {rows:,} completions need about {_gib(rows * per_row)} in memory until they are graded "
            f"({ROW_BYTES} bytes + {ROW_BYTES_PER_TOKEN} per token of max_new_tokens={max_new_tokens} each), more "
            f"than half of the {_gib(memory)} this process may use (the least of the machine's memory, its cgroup's "
            f"limit and ulimit -v); {fix(fit)}")


def check_context(model, task: Task, protocol: Protocol) -> None:
    """Refuse a decode that cannot fit the model's context window (``model.cfg.n_ctx``): the longest
    prompt of ``task`` plus ``protocol.max_new_tokens``. The runner calls it before anything runs.

    A prompt longer in characters than ``n_ctx`` tokens can span is refused before anything is
    tokenized (a 20 MB question would take minutes): no token of the tokenizer spans more characters
    than its longest vocabulary entry (times :data:`CHARS_PER_TOKEN_MARGIN`)."""
    n_ctx = getattr(getattr(model, "cfg", None), "n_ctx", None)
    if not isinstance(n_ctx, int) or not len(task):
        return
    if protocol.max_new_tokens >= n_ctx:
        raise ReachlensError(
            f"max_new_tokens={protocol.max_new_tokens} does not fit the model's context of {n_ctx} tokens "
            f"(with the prompt); use max_new_tokens below {n_ctx}"
        )
    prompts = render_prompts(task, protocol, task.questions, getattr(model, "tokenizer", None))
    _check_characters(model, task, prompts, n_ctx)
    longest = max(len(ids) for ids in encode(model, prompts))
    if longest + protocol.max_new_tokens > n_ctx:
        raise ReachlensError(
            f"the longest prompt ({longest} tokens) plus max_new_tokens={protocol.max_new_tokens} exceeds the "
            f"model's context of {n_ctx} tokens; use max_new_tokens <= {max(n_ctx - longest, 0)}"
        )


def _check_characters(model, task: Task, prompts: Sequence[str], n_ctx: int) -> None:
    """Refuse, untokenized, a prompt with more characters than ``n_ctx`` tokens of the model's
    tokenizer can span (see :func:`check_context`)."""
    i = max(range(len(prompts)), key=lambda j: len(prompts[j]))
    if len(prompts[i]) <= n_ctx:  # within the bound of any tokenizer (a token spans >= 1 character)
        return
    try:
        span = max(map(len, tokenizer_of(model).get_vocab()))
    except (AttributeError, TypeError, ValueError, ReachlensError):  # no vocabulary to bound by
        return
    bound = n_ctx * span * CHARS_PER_TOKEN_MARGIN
    if len(prompts[i]) > bound:
        raise ReachlensError(
            f"question {task.questions[i].question_id!r} makes a prompt of {len(prompts[i]):,} characters, more "
            f"than the model's {n_ctx}-token context can hold: a token of its tokenizer spans at most {span} "
            f"characters (its longest vocabulary entry), so the context holds at most {bound:,} ({n_ctx} x {span} "
            f"x {CHARS_PER_TOKEN_MARGIN}, the last for normalization). Shorten or drop that question"
        )
