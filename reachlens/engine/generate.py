"""Batched generation over a hooked model: shared-prefix prefill, in-place KV cache, exact greedy.

One call decodes many *rows*. A row is (prompt, seed): ``seed=None`` is the greedy deployment, an
integer seed is one temperature sample (see :mod:`reachlens.engine.rng`). Rows that share a prompt
share its prefill: each distinct prompt of a chunk is prefilled once (left-padded with the other
prompts of the chunk), then its cache is fanned out to its rows (on the fused path without copying
the prompt's keys; see :mod:`reachlens.engine.kv_cache`).

Decoding runs one token per step through :class:`~reachlens.engine.stack.LayerStack`, so the
caller's TransformerLens hooks fire on the prefill and on every decoding step. Rows whose tokens so
far are identical have identical next-token distributions, so by default (``share_prefixes``) the
decoder runs one batch entry per *distinct prefix* (a node of the sample tree), not per row: every
row still draws its own token from its node's distribution with its own counter-based uniform, and
a node whose rows draw different tokens forks (its cache row is copied into a free or new slot).
K samples of a confident model mostly agree on long stretches, so this computes each shared stretch
once (on the zoo's arith models, 5-10x fewer row-steps at K=64). Finished nodes (EOS or a stop
string) leave free slots that forks reuse; the batch is compacted when a quarter of it is free.

Hooks: under sharing a batch row is a distinct prefix, not a sample. So sharing is the default only
while no hook is attached other than reachlens' own (:func:`~reachlens.engine.hooks.row_agnostic`);
with any other hook attached, every row gets its own batch entry in every forward, prefill
included, and keeps it to the end of its chunk (see :mod:`reachlens.engine.hooks`, which also
says how a hook that opts in to sharing learns which samples each row stands for).

Text: decoded without special tokens (HF's ``skip_special_tokens=True``, as vLLM and lm-eval
report it); the token ids keep everything.

Exactness: greedy rows take ``argmax`` of float32 logits, as HuggingFace ``generate(do_sample=False)``
does, and the cached decode equals a full re-forward (tested token for token). Left padding changes
matmul shapes, so a padded batch can differ from an unpadded run in the last bits of a logit (as
can any change of batch composition); a near-tie can then flip a token. Chunks sort prompts by
length to keep padding short.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Literal

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from reachlens.engine.hooks import BatchRows, _rows, user_hooks
from reachlens.engine.rng import sample_inverse_cdf
from reachlens.engine.stack import LayerStack
from reachlens.engine.stopping import StopChecker
from reachlens.engine.tokens import encode_prompts, tokenizer_of
from reachlens.errors import ReachlensError

__all__ = ["SamplingParams", "Row", "Completion", "generate", "tokenize_prompts"]

FinishReason = Literal["eos", "stop", "length"]


@dataclass(frozen=True)
class SamplingParams:
    """How every row of one :func:`generate` call decodes."""

    max_new_tokens: int
    """Most tokens a row may generate (the row finishes with ``finish_reason="length"``)."""
    temperature: float = 1.0
    """Sampling temperature for rows with a seed (greedy rows ignore it). Must be > 0."""
    top_p: float = 1.0
    """Nucleus mass for sampled rows; 1.0 keeps the whole distribution."""
    stop: tuple[str, ...] = ()
    """A row finishes as soon as its text contains one of these; the text is cut before it."""
    stop_at_eos: bool = True
    """Finish a row when it emits an end-of-sequence token (not included in the text)."""

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ReachlensError(f"max_new_tokens={self.max_new_tokens!r} must be at least 1")
        if not self.temperature > 0:
            raise ReachlensError(f"temperature={self.temperature!r} must be > 0 for sampled rows")
        if not 0 < self.top_p <= 1:
            raise ReachlensError(f"top_p={self.top_p!r} must lie in (0, 1]")
        if any(not s for s in self.stop):
            raise ReachlensError(f"stop={self.stop!r} contains an empty string")


@dataclass(frozen=True)
class Row:
    """One completion to produce: which prompt, and its sampling seed (None: greedy)."""

    prompt: int
    seed: int | None = None
    tag: Hashable = None
    """Any label the caller wants a hook to see (:class:`~reachlens.engine.hooks.BatchRows`); the
    audit uses ``(question_id, sample_idx)``. It does not change what is generated."""


@dataclass(frozen=True)
class Completion:
    """One generated continuation."""

    text: str
    """Decoded continuation, cut before the first stop string; EOS is not included."""
    token_ids: tuple[int, ...]
    """Generated token ids (up to and including the token that completed a stop string)."""
    finish_reason: FinishReason
    logprobs: tuple[float, ...]
    """Per generated token, its log-probability under the untempered model distribution."""

    @property
    def mean_logprob(self) -> float:
        return sum(self.logprobs) / len(self.logprobs) if self.logprobs else float("nan")


def tokenize_prompts(tokenizer, prompts: Sequence[str]) -> list[list[int]]:
    """Token ids of each prompt, with the tokenizer's default special tokens (BOS where it adds one;
    an EOS it appends is dropped, as TransformerLens' ``to_tokens`` drops it)."""
    return encode_prompts(tokenizer, prompts)


def _eos_ids(model) -> set[int]:
    ids: set[int] = set()
    tok = tokenizer_of(model)
    if getattr(tok, "eos_token_id", None) is not None:
        ids.add(int(tok.eos_token_id))
    gen_cfg = getattr(getattr(model, "original_model", None), "generation_config", None)
    eos = getattr(gen_cfg, "eos_token_id", None)
    if isinstance(eos, int):
        ids.add(eos)
    elif isinstance(eos, (list, tuple)):
        ids.update(int(e) for e in eos)
    return ids


def _chunks(rows: Sequence[Row], prompt_lens: Sequence[int], max_rows: int) -> list[list[int]]:
    """Group row indices into chunks of at most ``max_rows``, rows of one prompt kept together and
    prompts sorted by length, so that a chunk's prompts need little left padding."""
    by_prompt: dict[int, list[int]] = {}
    for i, r in enumerate(rows):
        by_prompt.setdefault(r.prompt, []).append(i)
    order = sorted(by_prompt, key=lambda p: (prompt_lens[p], p))
    chunks: list[list[int]] = []
    cur: list[int] = []
    for p in order:
        members = by_prompt[p]
        for start in range(0, len(members), max_rows):
            part = members[start : start + max_rows]
            if cur and len(cur) + len(part) > max_rows:
                chunks.append(cur)
                cur = []
            cur.extend(part)
    if cur:
        chunks.append(cur)
    return chunks


@torch.inference_mode()
def generate(
    model,
    prompts: Sequence[str],
    rows: Sequence[Row],
    params: SamplingParams,
    *,
    route: Sequence[int] | None = None,
    max_batch_rows: int = 256,
    on_chunk: Callable[[list[int], list[Completion]], None] | None = None,
    fused: bool = True,
    share_prefixes: bool | None = None,
) -> list[Completion]:
    """Generate one completion per row.

    Args:
        model: a TransformerBridge (see :func:`reachlens.load_model`).
        prompts: the distinct prompt strings.
        rows: what to generate; ``rows[i].prompt`` indexes ``prompts``.
        params: decode length, temperature, top-p, stop strings.
        route: layer route to run (the full model when None).
        max_batch_rows: most rows decoded together.
        on_chunk: called with (row indices, their completions) as each chunk finishes.
        fused: take the engine's fused path where it applies (:func:`~reachlens.engine.describe`);
            False runs the generic path (the family's own forward code, the bridge's own attention).
        share_prefixes: decode one batch entry per distinct token prefix instead of one per row
            (same tokens, far less compute for K samples). None (default): share unless a hook other
            than reachlens' own is attached (:func:`~reachlens.engine.hooks.user_hooks`); False:
            every row has its own batch entry in every forward; True: share even with hooks (a hook
            reads :func:`~reachlens.engine.hooks.current_rows` to know which rows an entry stands for).

    Returns:
        Completions aligned with ``rows``.

    >>> outs = generate(model, ["Q: 1+2=?\\nA:"], [Row(0), Row(0, seed=7)], SamplingParams(16, 0.8))  # doctest: +SKIP
    """
    for i, r in enumerate(rows):
        if not 0 <= r.prompt < len(prompts):
            raise ReachlensError(f"rows[{i}].prompt={r.prompt} but there are {len(prompts)} prompts")
    stack = LayerStack(model, fused=fused)
    steps = stack.route(route)
    tok = tokenizer_of(model)
    ids = tokenize_prompts(tok, prompts)
    for i, p in enumerate(ids):
        if not p:
            raise ReachlensError(f"prompt {i} ({prompts[i]!r}) tokenizes to nothing; a prompt needs at least one token")
    if share_prefixes is None:
        share_prefixes = not user_hooks(model)
    stopper = StopChecker(tok, params.stop, _eos_ids(model) if params.stop_at_eos else set())
    tags = [r.tag for r in rows]
    results: list[Completion | None] = [None] * len(rows)
    for chunk in _chunks(rows, [len(p) for p in ids], max_batch_rows):
        outs = _generate_chunk(stack, steps, ids, [rows[i] for i in chunk], params, stopper, share_prefixes,
                               row_ids=tuple(chunk), tags=tags)
        for i, c in zip(chunk, outs):
            results[i] = c
        if on_chunk is not None:
            on_chunk(chunk, outs)
    return [c for c in results if c is not None]


def _prefill_inputs(
    prompt_ids: list[list[int]], pad_id: int, device: torch.device
) -> tuple[Int[Tensor, "p pos"], Bool[Tensor, "p pos"], Int[Tensor, "p pos"]]:
    width = max(len(p) for p in prompt_ids)
    ids = torch.full((len(prompt_ids), width), pad_id, dtype=torch.long)
    valid = torch.zeros((len(prompt_ids), width), dtype=torch.bool)
    for i, p in enumerate(prompt_ids):
        ids[i, width - len(p) :] = torch.tensor(p)
        valid[i, width - len(p) :] = True
    positions = (valid.long().cumsum(-1) - 1).clamp_(min=0)
    return ids.to(device), valid.to(device), positions.to(device)


def _choose(
    logits: Float[Tensor, "nodes vocab"],
    node: Int[Tensor, "rows"],
    seeds: Int[Tensor, "rows"],
    greedy: Bool[Tensor, "rows"],
    step: int,
    params: SamplingParams,
) -> tuple[Int[Tensor, "rows"], Float[Tensor, "rows"]]:
    """Each row's token from its node's logits, and the token's untempered log-probability."""
    if bool(greedy.all()):
        chosen = logits.argmax(-1).index_select(0, node)
    else:
        chosen = sample_inverse_cdf(logits, seeds, step, params.temperature, params.top_p, group=node)
        if bool(greedy.any()):
            chosen = torch.where(greedy, logits.argmax(-1).index_select(0, node), chosen)
    logp = torch.log_softmax(logits.float(), -1)
    return chosen, logp[node, chosen]


def _generate_chunk(
    stack: LayerStack,
    steps: tuple[int, ...],
    all_ids: list[list[int]],
    rows: list[Row],
    params: SamplingParams,
    stopper: StopChecker,
    share_prefixes: bool = True,
    *,
    row_ids: tuple[int, ...] | None = None,
    tags: Sequence[Hashable] | None = None,
) -> list[Completion]:
    """Decode one chunk of rows. With ``share_prefixes`` a batch entry is a node of the sample tree
    (first one per prompt); without, batch entry ``i`` is row ``i`` from the prefill to the end."""
    device = stack.device
    n = len(rows)
    row_ids = tuple(range(n)) if row_ids is None else row_ids
    tags = [r.tag for r in rows] if tags is None else tags
    pad_id = tokenizer_of(stack.model).pad_token_id
    pad_id = 0 if pad_id is None else int(pad_id)
    if share_prefixes:
        prompt_order = sorted({r.prompt for r in rows})
        local = {p: i for i, p in enumerate(prompt_order)}
        row_node = torch.tensor([local[r.prompt] for r in rows])
        ids, valid, positions = _prefill_inputs([all_ids[p] for p in prompt_order], pad_id, device)
    else:
        row_node = torch.arange(n)
        ids, valid, positions = _prefill_inputs([all_ids[r.prompt] for r in rows], pad_id, device)
    width = ids.shape[1]
    padded = not bool(valid.all())
    cache = stack.new_cache(width + params.max_new_tokens, steps)

    def forward(inputs, pos, mask, step):
        where = BatchRows(row_node.clone(), row_ids, tags, int(inputs.shape[0]), step)
        with _rows(where):
            return stack.forward(inputs, position_ids=pos, attention_mask=mask, cache=cache, route=steps,
                                 last_only=True)[:, -1]

    logits = forward(ids, positions, valid if padded else None, -1)
    if share_prefixes and stack.cascade:
        # rows read their prompt's keys in place (no K-fold copy of the prompt): the fused
        # attention scores all rows of a prompt against them at once ("cascade"). Any other
        # attention wants every row's keys as one tensor, which the plain layout returns as a view
        # (a fork copies its parent's row once instead of every step gathering the prompt's keys).
        cache.share(torch.arange(ids.shape[0], device=device))
    key_valid = torch.ones((ids.shape[0], width + params.max_new_tokens), dtype=torch.bool, device=device)
    key_valid[:, :width] = valid
    next_pos = positions[:, -1] + 1
    seeds = torch.tensor([0 if r.seed is None else r.seed for r in rows], dtype=torch.int64, device=device)
    greedy = torch.tensor([r.seed is None for r in rows], device=device)

    tokens = torch.full((n, params.max_new_tokens), pad_id, dtype=torch.long)
    logps = torch.zeros((n, params.max_new_tokens), dtype=torch.float32)
    lengths = torch.zeros(n, dtype=torch.long)
    reasons: list[FinishReason] = ["length"] * n
    live = torch.arange(n)  # rows still decoding
    vocab = logits.shape[-1]

    for step in range(params.max_new_tokens):
        live_d = live.to(device)
        chosen, lp = _choose(logits, row_node[live].to(device), seeds[live_d], greedy[live_d], step, params)
        chosen_cpu = chosen.cpu()
        tokens[live, step] = chosen_cpu
        logps[live, step] = lp.cpu()
        lengths[live] = step + 1
        # the children: one per distinct (node, token); sorted, so a node's children are adjacent
        child_key, child_of_row = torch.unique(row_node[live] * vocab + chosen_cpu, return_inverse=True)
        parent, child_token = child_key // vocab, child_key % vocab
        rep = torch.full((child_key.shape[0],), n, dtype=torch.long).scatter_reduce_(
            0, child_of_row, live, reduce="amin")  # one row per child, for the stop check
        eos, stop = stopper.check(child_token, tokens, rep, step)
        finished = eos | stop
        if bool(finished.any()):
            row_finished = finished[child_of_row]
            for r, e in zip(live[row_finished].tolist(), eos[child_of_row[row_finished]].tolist()):
                reasons[r] = "eos" if e else "stop"
            live, child_of_row = live[~row_finished], child_of_row[~row_finished]
        if step + 1 == params.max_new_tokens or live.numel() == 0:
            break
        # place the unfinished children: a node's first child continues in its slot, the others are
        # forks copied into slots left free (finished or childless nodes) or appended. Without
        # sharing every node has one row, so there are no forks, and no compaction: a finished
        # row's entry keeps its place (fed padding) so that entry i stays row i.
        kept = (~finished).nonzero().flatten()
        k_parent = parent[kept]
        first = torch.ones_like(k_parent, dtype=torch.bool)
        first[1:] = k_parent[1:] != k_parent[:-1]
        slot = torch.full((child_key.shape[0],), -1, dtype=torch.long)
        slot[kept[first]] = k_parent[first]
        n_entries = int(cache.batch)
        occupied = torch.zeros(n_entries, dtype=torch.bool)
        occupied[k_parent[first]] = True
        free = (~occupied).nonzero().flatten()
        forks = kept[~first]
        if forks.numel():
            extra = max(0, forks.numel() - free.numel())
            dst = torch.cat([free[: forks.numel()], torch.arange(n_entries, n_entries + extra)])
            src = parent[forks]
            slot[forks] = dst
            src_d, dst_d = src.to(device), dst.to(device)
            cache.copy_rows(src_d, dst_d)
            if extra:
                key_valid = torch.cat([key_valid, key_valid.new_ones((extra, key_valid.shape[1]))])
                next_pos = torch.cat([next_pos, next_pos.new_zeros(extra)])
            key_valid[dst_d] = key_valid[src_d]
            next_pos[dst_d] = next_pos[src_d]
        if share_prefixes and (int(cache.batch) - kept.numel()) * 4 > int(cache.batch):  # compact
            order = slot[kept].to(device)
            cache.select_rows(order)
            key_valid, next_pos = key_valid[order], next_pos[order]
            slot[kept] = torch.arange(kept.numel())
        row_node = torch.full((n,), -1, dtype=torch.long)
        row_node[live] = slot[child_of_row]
        inputs = torch.full((int(cache.batch),), pad_id, dtype=torch.long)
        inputs[slot[kept]] = child_token[kept]
        logits = forward(inputs.to(device)[:, None], next_pos[:, None],
                         key_valid[:, : cache.length + 1] if padded else None, step)
        next_pos = next_pos + 1
    tok = tokenizer_of(stack.model)
    token_lists = [tokens[r, : int(lengths[r])].tolist() for r in range(n)]
    texts = tok.batch_decode(
        [t[:-1] if reasons[r] == "eos" else t for r, t in enumerate(token_lists)], skip_special_tokens=True
    )
    return [
        Completion(stopper.cut(texts[r]), tuple(token_lists[r]), reasons[r],
                   tuple(logps[r, : int(lengths[r])].tolist()))
        for r in range(n)
    ]
