"""Batched generation over a hooked model: shared-prefix prefill, in-place KV cache, exact greedy.

One module (about 610 lines) because the decode loop and the chunk state it advances (prefill, choose,
advance, copy/select, forward) are one algorithm; its parts are the engine's other modules.

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
once. Finished nodes (EOS or a stop string) leave free slots that forks reuse; the slots still free are filled
from the end of the batch (only the moved rows' cache is copied), so a forward never computes a free slot. The tree is :class:`~reachlens.engine.sample_tree.SampleTree`
(bookkeeping, tested without a model); the loop of :func:`_generate_chunk` reads choose -> advance
the tree -> copy/select cache rows -> forward.

Without sharing (``share_prefixes=False``) no two samples share an entry after the prompt, but the prompt is
still prefilled once per (prompt, arm, route) and fanned out to its rows at the first step (the rows read its keys
in place on the fused path), and finished rows leave the batch: a forward computes the live samples only, each
one's generated keys in one contiguous buffer (the sample tree with ``merge=False``). HuggingFace ``generate``
instead prefills the prompt once per sample and feeds finished samples padding to the end.

Hooks: under sharing a batch row is a distinct prefix, not a sample, and without it batch rows move as samples
finish. So sharing is the default only while no hook is attached other than reachlens' own
(:func:`~reachlens.engine.hooks.row_agnostic`); with any other hook attached, every row gets its own batch entry in
every forward, prefill included, and keeps it to the end of its chunk (see :mod:`reachlens.engine.hooks`, which
also says how a hook that opts in to sharing learns which samples each row stands for).

Arms: a row may carry an *arm* (``Row.arm``: the intervention it runs, any hashable key; None is the
plain model). Rows of different arms never share a batch entry: the sample tree's roots are the
distinct (prompt, arm) pairs of a chunk, so all arms of a question decode together in one call,
prefilled in one batched forward, and a per-arm hook (:func:`~reachlens.engine.hooks.per_arm`) acts
on its entries only. Every arm a row carries must be served by an attached per-arm hook, or the call
is refused before anything runs. Rows without arms decode exactly as before. In the prefill an arm's
entries run only from the first layer its hooks touch (:func:`~reachlens.engine.hooks.plain_below`): below
it they compute what the plain model computes on the same prompt, so they take the activations and keys
of the prompt's entry that starts highest (the plain arm's where present; :class:`~reachlens.engine.stack.SharedBelow`):
a zero-ablation sweep over every layer and {mlp, attn} skips 38.5 % of its prefill's block calls at 6 layers, 47 %
at 24. A hook that is not
per-arm stops that sharing at its block (it may read every entry: every entry runs there).

Routes: a row may carry its own layer route (``Row.route``; None: the call's ``route=``). Rows of
different routes decode in one call too, never sharing a batch entry (the roots are the distinct
(prompt, arm, route) triples): at each route step every layer runs once, on the entries whose route
runs it there (:class:`~reachlens.engine.stack.RowRoutes`), so a route search's many routes of a
question or two each decode as one batch. A family with sliding-window layers decodes one route per
call instead (a cache slot holds one window).

Memory: the first call makes glibc keep freed blocks for reuse, and the cyclic garbage collector pauses over each
chunk's loop (:mod:`reachlens.engine.memory`: the loop allocates and frees the same tensors every step; the
tokens are unchanged).

Text: decoded without special tokens (HF's ``skip_special_tokens=True``, as vLLM and lm-eval
report it); the token ids keep everything.

Exactness: greedy rows take ``argmax`` of float32 logits, as HuggingFace ``generate(do_sample=False)``
does, and the cached decode equals a full re-forward (tested token for token). Left padding changes
matmul shapes, so a padded batch can differ from an unpadded run in the last bits of a logit (as
can any change of batch composition); a near-tie can then flip a token. Chunks sort prompts by
length to keep padding short.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from reachlens.engine.hooks import BatchRows, _rows, arms_served, plain_below, user_hooks
from reachlens.engine.host_reads import to_device
from reachlens.engine.memory import check_decode, keep_freed_memory, no_gc
from reachlens.engine.progress import decode_started, decode_step
from reachlens.engine.rng import Workspace, sample_inverse_cdf
from reachlens.engine.sample_tree import FinishReason, SampleTree
from reachlens.engine.stack import LayerStack, RowRoutes, SharedBelow
from reachlens.engine.stopping import StopChecker
from reachlens.engine.tokens import encode_prompts, tokenizer_of
from reachlens.errors import ReachlensError
from reachlens.protocol import Protocol

__all__ = ["Row", "Completion", "generate", "tokenize_prompts"]


@dataclass(frozen=True)
class Row:
    """One completion to produce: which prompt, and its sampling seed (None: greedy)."""

    prompt: int
    seed: int | None = None
    tag: Hashable = None
    """Any label the caller wants a hook to see (:class:`~reachlens.engine.hooks.BatchRows`); the
    audit uses ``(question_id, sample_idx)``. It does not change what is generated."""
    arm: Hashable = None
    """The intervention this row runs: a key that attached per-arm hooks serve (the ``arm=`` of the
    factories in :mod:`reachlens.interventions`, or a :class:`~reachlens.interventions.Graft`); None:
    the plain model (hooks built without ``arm=`` still act on every row). Rows of different arms
    never share a batch entry."""
    route: tuple[int, ...] | None = None
    """The layer route this row decodes along (None: the call's ``route=``). Rows of different routes decode in
    one batch, never sharing an entry: each block runs on the entries whose route runs it at that step
    (:class:`~reachlens.engine.stack.RowRoutes`)."""


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
    """Token ids of each prompt, with the tokenizer's default special tokens (BOS where it adds one, and
    one only: none added to a prompt that starts with the BOS text, such as a rendered chat template; an
    EOS it appends is dropped, as TransformerLens' ``to_tokens`` drops it)."""
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


def _arm_ids(model, rows: Sequence[Row]) -> tuple[tuple[Hashable, ...], list[int]]:
    """The distinct arms of ``rows`` (first appearance order) and each row's index into them;
    refuses an arm that no attached per-arm hook serves."""
    index: dict[Hashable, int] = {}
    try:
        ids = [index.setdefault(r.arm, len(index)) for r in rows]
    except TypeError:
        bad = next(r.arm for r in rows if not isinstance(r.arm, Hashable))
        raise ReachlensError(f"Row.arm {bad!r} is not hashable; name an arm with a hashable key (a str, a tuple, "
                             "a Graft)") from None
    arms = tuple(index)
    if any(a is not None for a in arms):
        served = arms_served(model)
        missing = [a for a in arms if a is not None and a not in served]
        if missing:
            known = ", ".join(repr(a) for a in list(served)[:8]) or "none"
            raise ReachlensError(f"rows carry arm {missing[0]!r}, which no attached hook serves (hooks serve: {known}); "
                                 "attach its hooks with model.hooks(fwd_hooks=...) built with arm=, or drop the arm")
    return arms, ids


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
    protocol: Protocol,
    *,
    stop_at_eos: bool = True,
    route: Sequence[int] | None = None,
    max_batch_rows: int = 256,
    fused: bool = True,
    share_prefixes: bool | None = None,
) -> list[Completion]:
    """Generate one completion per row.

    Args:
        model: a TransformerBridge (see :func:`reachlens.load_model`).
        prompts: the distinct prompt strings.
        rows: what to generate; ``rows[i].prompt`` indexes ``prompts``.
        protocol: how to decode (:class:`~reachlens.protocol.Protocol`): its ``max_new_tokens``,
            ``temperature`` and ``top_p`` (for rows with a seed; greedy rows ignore them) and ``stop``
            strings (None or empty: none; resolve the protocol against its task for the task's own).
            Its ``k`` and ``seed`` are the caller's business: rows carry their seeds.
        stop_at_eos: finish a row when it emits an end-of-sequence token (not included in the text).
        route: layer route to run (the full model when None); a row's own ``Row.route`` takes precedence.
        max_batch_rows: most rows decoded together.
        fused: the fused path where it applies (:func:`~reachlens.engine.describe`); False: the generic one.
        share_prefixes: one batch entry per distinct token prefix (same tokens, far less compute for K samples).
            None: share unless a user hook is attached (:func:`~reachlens.engine.hooks.user_hooks`); False: one
            entry per live row after each prompt's one prefill, or, with a user hook, per row in every forward to
            the chunk's end; True: share even with hooks (a hook reads :func:`~reachlens.engine.hooks.current_rows`).

    Returns: completions aligned with ``rows``.

    >>> outs = generate(model, ["Q: 1+2=?\\nA:"], [Row(0), Row(0, seed=7)], Protocol("arith", k=1, temperature=0.8, max_new_tokens=16))  # doctest: +SKIP
    """
    _check_rows(prompts, rows, protocol)
    keep_freed_memory()
    stack = LayerStack(model, fused=fused)
    routes, route_ids = _route_ids(stack, rows, route)
    if len(routes) > 1 and any(w is not None for w in stack.windows):  # a cache slot holds one window
        return _per_route(model, prompts, rows, protocol, routes, route_ids, stop_at_eos=stop_at_eos,
                          max_batch_rows=max_batch_rows, fused=fused, share_prefixes=share_prefixes)
    ids = _prompt_ids(tokenizer_of(model), prompts)
    check_decode(model, len(rows), max(map(len, ids)) + protocol.max_new_tokens, max_batch_rows)
    share_prefixes = _share_by_default(model) if share_prefixes is None else share_prefixes
    keep_rows = not share_prefixes and bool(user_hooks(model))  # the hooks' promise: one entry per row throughout
    stopper = StopChecker(tokenizer_of(model), tuple(protocol.stop or ()), _eos_ids(model) if stop_at_eos else set())
    tags = [r.tag for r in rows]
    arms, arm_ids = _arm_ids(model, rows)
    luts, below = {}, plain_below(model, arms) if not keep_rows and routes == (stack.identity,) else None
    results: dict[int, Completion] = {}
    decode_started(len(rows), protocol.max_new_tokens)
    for chunk in _chunks(rows, [len(p) for p in ids], max_batch_rows):
        runs = _ChunkRuns(routes, np.array([route_ids[i] for i in chunk], dtype=np.int64), arms,
                          np.array([arm_ids[i] for i in chunk], dtype=np.int64), luts, below)
        with no_gc():
            outs = _generate_chunk(stack, ids, [rows[i] for i in chunk], protocol, stopper, share_prefixes,
                                   row_ids=tuple(chunk), tags=tags, runs=runs, keep_rows=keep_rows)
        results.update(zip(chunk, outs))
    return [results[i] for i in range(len(rows))]


def _share_by_default(model) -> bool:
    """Whether a call shares prefixes when not told: the rule, by shape and device, is written down here.

    Share wherever no user hook is attached (:func:`~reachlens.engine.hooks.user_hooks`), at every shape and on
    every device. On the CPU sharing never loses (a step costs its batch's matrix products: fewer entries, less
    work). On CUDA a small model's step is bound by kernel launches and host work rather than by its batch, so
    sharing saves less and its tree surgery (fork copies, compaction) costs: the one measurement (H200,
    2026-12-04, Qwen2.5-0.5B shape, 1 prompt x K=64 diverging samples, 10.6 host syncs per step then) had sharing
    at 0.50x HF ``generate`` and no sharing at 0.61x. Not re-measured since the loop reads the host once per step
    (no GPU lent): ``benchmarks/gpu/run.sh`` times both at 1, 4 and 16 prompts and at the 0.5B and 1.5B shapes,
    and a CUDA rule by shape is to be chosen from its figures; until then the CPU's rule holds everywhere.
    """
    return not user_hooks(model)


def _prompt_ids(tok, prompts: Sequence[str]) -> list[list[int]]:
    """:func:`tokenize_prompts`, refusing a prompt that tokenizes to nothing."""
    ids = tokenize_prompts(tok, prompts)
    for i, p in enumerate(ids):
        if not p:
            raise ReachlensError(f"prompt {i} ({prompts[i]!r}) tokenizes to nothing; a prompt needs at least one token")
    return ids


def _route_ids(
    stack: LayerStack, rows: Sequence[Row], route: Sequence[int] | None
) -> tuple[tuple[tuple[int, ...], ...], list[int]]:
    """The distinct routes of ``rows`` (``route`` for a row without one; first appearance order), each validated
    against the model, and each row's index into them."""
    default = stack.route(route)
    validated: dict[tuple, tuple[int, ...]] = {}
    index: dict[tuple[int, ...], int] = {}
    ids = []
    for i, r in enumerate(rows):
        steps = default
        if r.route is not None:
            given = tuple(r.route)
            if given not in validated:
                try:
                    validated[given] = stack.route(given)
                except ReachlensError as e:
                    raise ReachlensError(f"rows[{i}].route={r.route!r}: {e}") from None
            steps = validated[given]
        ids.append(index.setdefault(steps, len(index)))
    return tuple(index), ids


def _per_route(model, prompts, rows, protocol, routes, route_ids, **kwargs) -> list[Completion]:
    """``generate`` once per route (for a model whose cache slots cannot mix layers), completions back in order."""
    out: list[Completion | None] = [None] * len(rows)
    for k, steps in enumerate(routes):
        members = [i for i, r in enumerate(route_ids) if r == k]
        comps = generate(model, prompts, [replace(rows[i], route=None) for i in members], protocol, route=steps,
                         **kwargs)
        for i, c in zip(members, comps):
            out[i] = c
    return [c for c in out if c is not None]


def _check_rows(prompts: Sequence[str], rows: Sequence[Row], protocol: Protocol) -> None:
    """Refuse a row of a prompt that does not exist, or a sampled row under a greedy protocol."""
    for i, r in enumerate(rows):
        if not 0 <= r.prompt < len(prompts):
            raise ReachlensError(f"rows[{i}].prompt={r.prompt} but there are {len(prompts)} prompts")
    if protocol.temperature <= 0 and any(r.seed is not None for r in rows):
        raise ReachlensError(f"temperature={protocol.temperature!r} with sampled rows (rows with a seed); "
                             "sampling needs temperature > 0 (greedy rows have seed=None)")


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


def _slot_state(
    valid: Bool[Tensor, "p pos"], positions: Int[Tensor, "p pos"], max_new_tokens: int,
) -> tuple[Bool[Tensor, "p key"], Int[Tensor, "p"]]:
    """Per slot after the prefill: which cached positions are real tokens (left padding is not), and the next
    position."""
    key_valid = torch.ones((valid.shape[0], valid.shape[1] + max_new_tokens), dtype=torch.bool, device=valid.device)
    key_valid[:, : valid.shape[1]] = valid
    return key_valid, positions[:, -1] + 1


def _move_rows(cache, move, key_valid: Bool[Tensor, "slot pos"], next_pos: Int[Tensor, "slot"]):
    """Apply a tree step's moves to the cache and the per-slot key mask and positions: forks copy their parent's
    rows (into new slots if the tree grew), a compaction moves the last slots in use into the free ones. The moves
    are host arrays, sent to the device; nothing is read back."""
    device = key_valid.device
    if move.fork_dst_host.size:
        cache.copy_rows(move.fork_src_host, move.fork_dst_host)
        src, dst = to_device(move.fork_src_host, device), to_device(move.fork_dst_host, device)
        if move.grown:
            key_valid = torch.cat([key_valid, key_valid.new_ones((move.grown, key_valid.shape[1]))])
            next_pos = torch.cat([next_pos, next_pos.new_zeros(move.grown)])
        key_valid[dst] = key_valid[src]
        next_pos[dst] = next_pos[src]
    if move.compaction_host is not None:
        cache.select_rows(move.compaction_host)
        order = to_device(move.compaction_host, device)
        key_valid, next_pos = key_valid[order], next_pos[order]
    return key_valid, next_pos


def _choose(
    logits: Float[Tensor, "nodes vocab"],
    node: np.ndarray,
    seeds: Int[Tensor, "rows"],
    greedy: np.ndarray,
    step: int,
    protocol: Protocol,
    workspace: Workspace | None = None,
) -> tuple[Int[Tensor, "rows"], Float[Tensor, "rows"]]:
    """Each row's token from its node's logits (``node``: each row's, on the host), and the token's untempered
    log-probability; ``greedy`` says, on the host, which rows decode greedily.

    The work over the vocabulary (argmax, the sampler's float64 softmax and cumulative sum, the
    float32 log-softmax) writes into ``workspace``'s buffers; the argmax runs on greedy rows' nodes only.
    Nothing is read back from the device: the index tensors are built on the host and sent.
    """
    ws = Workspace() if workspace is None else workspace
    logits = logits.detach()  # tokens and their log-probabilities are records, not part of a graph
    node_d = to_device(node, logits.device)
    if greedy.all():
        chosen = logits.argmax(-1).index_select(0, node_d)
    else:
        chosen = sample_inverse_cdf(logits, seeds, step, protocol.temperature, protocol.top_p, group=node,
                                    workspace=ws)
        if greedy.any():
            rows = to_device(np.flatnonzero(greedy), logits.device)
            chosen = chosen.index_copy(0, rows, logits.index_select(0, node_d.index_select(0, rows)).argmax(-1))
    logits = logits.float()
    logp = torch.ops.aten._log_softmax.out(logits, -1, False,
                                           out=ws.take("logp", tuple(logits.shape), logits.dtype, logits.device))
    return chosen, logp[node_d, chosen]


def _to_host(chosen: Int[Tensor, "rows"], logp: Float[Tensor, "rows"]) -> tuple[np.ndarray, np.ndarray]:
    """The step's tokens and their log-probabilities on the host, in one read (one float64 copy holds both exactly:
    token ids are below 2**53, a float32 is a float64)."""
    both = torch.stack([chosen.to(torch.float64), logp.to(torch.float64)]).cpu().numpy()
    return both[0].astype(np.int64), both[1].astype(np.float32)


def _roots(rows: list[Row], runs: _ChunkRuns, share: bool) -> tuple[np.ndarray, list[int], SharedBelow | None]:
    """Each row's slot in the prefill, the prompt of each prefill slot, and which slots take another's layers below
    their arm's first (:meth:`_ChunkRuns.shared_below`): with sharing, one slot per distinct (prompt, arm, route)
    (the sample tree's roots, in that order); without, one per row, and none shared."""
    if not share:
        return np.arange(len(rows)), [r.prompt for r in rows], None
    arm_of_row = np.zeros(len(rows), dtype=np.int64) if runs.arm_of_row is None else runs.arm_of_row
    root_of_row = list(zip((r.prompt for r in rows), arm_of_row.tolist(), runs.route_of_row.tolist()))
    roots = sorted(set(root_of_row))
    local = {root: i for i, root in enumerate(roots)}
    slots, prompts = np.array([local[root] for root in root_of_row], dtype=np.int64), [root[0] for root in roots]
    return slots, prompts, runs.shared_below(slots, prompts)


@dataclass(frozen=True)
class _ChunkRuns:
    """What each row of a chunk runs: its layer route, and its arm (as :class:`BatchRows` hands arms to hooks).
    Host arrays: the loop builds each forward's index tensors from them."""

    routes: tuple[tuple[int, ...], ...]
    """The call's distinct routes."""
    route_of_row: np.ndarray
    """Per row of the chunk, its index into ``routes``."""
    arms: tuple[Hashable, ...] = (None,)
    """The call's distinct arms."""
    arm_of_row: np.ndarray | None = None
    """Per row of the chunk, its index into ``arms`` (None: every row runs ``arms[0]``)."""
    luts: dict = field(default_factory=dict)
    """Hooks' lookup tables over ``arms``, shared by every forward of the call."""
    plain_below: tuple[int, ...] | None = None
    """Per arm, the layer below which its entries compute what the plain model's do
    (:func:`~reachlens.engine.hooks.plain_below`); None: no sharing of layers between arms."""

    @classmethod
    def plain(cls, route: tuple[int, ...], n: int) -> _ChunkRuns:
        """``n`` rows on one route, with no arm."""
        return cls((route,), np.zeros(n, dtype=np.int64), arm_of_row=np.zeros(n, dtype=np.int64))

    def entry_routes(self, slot_of_row: np.ndarray, n_entries: int) -> tuple[int, ...] | RowRoutes:
        """The route of a forward's batch entries, each row's at its entry (``slot_of_row``; -1: finished): one
        route when every row of the chunk runs the same, else a :class:`RowRoutes` (a free entry runs no layer)."""
        first = int(self.route_of_row[0])
        if (self.route_of_row == first).all():
            return self.routes[first]
        of_entry = np.full(n_entries, -1, dtype=np.int64)
        live = slot_of_row >= 0
        of_entry[slot_of_row[live]] = self.route_of_row[live]
        return RowRoutes(self.routes, of_entry)

    def shared_below(self, slot_of_row: np.ndarray, prompts: list[int]) -> SharedBelow | None:
        """For the prefill of a chunk's roots (slot ``i`` prefills prompt ``prompts[i]``): each slot's arm runs its
        own layers from :attr:`plain_below` up; below, it is the slot of the same prompt whose arm starts highest
        (the plain arm where present). None when no slot would skip a layer."""
        if self.plain_below is None or self.arm_of_row is None:
            return None
        arm_of_slot = np.zeros(len(prompts), dtype=np.int64)
        arm_of_slot[slot_of_row] = self.arm_of_row
        join = tuple(self.plain_below[a] for a in arm_of_slot.tolist())
        top: dict[int, int] = {}
        for slot, p in enumerate(prompts):
            if p not in top or join[slot] > join[top[p]]:
                top[p] = slot
        base = tuple(top[p] for p in prompts)
        if not any(b != i and j > 0 for i, (j, b) in enumerate(zip(join, base))):
            return None
        return SharedBelow(join, base)


def _generate_chunk(
    stack: LayerStack,
    all_ids: list[list[int]],
    rows: list[Row],
    protocol: Protocol,
    stopper: StopChecker,
    share_prefixes: bool = True,
    *,
    row_ids: tuple[int, ...] | None = None,
    tags: Sequence[Hashable] | None = None,
    runs: _ChunkRuns | None = None,
    keep_rows: bool = False,
) -> list[Completion]:
    """Decode one chunk of rows: prefill, then choose -> advance the sample tree -> copy/select cache
    rows -> forward, once per new token. With ``share_prefixes`` a batch entry is a node of the sample
    tree (first one per (prompt, arm, route)); without, the prefill is the same (one entry per (prompt, arm,
    route)) and then batch entry ``i`` is the ``i``-th live row (a finished row's entry is dropped); with
    ``keep_rows`` too (what a hook that is not row-agnostic is promised), batch entry ``i`` is row ``i`` from the
    prefill to the end. ``runs`` says each row's route and arm (default: the full model, no arm). Reads
    ``protocol.max_new_tokens``, ``protocol.temperature``, ``protocol.top_p`` (``protocol.stop`` is already in
    ``stopper``)."""
    keep_rows = keep_rows and not share_prefixes
    layout = _Layout(share_prefixes, keep_rows, stack.cascade and not keep_rows)
    with stack.kernels():  # swapped in once for the chunk's forwards, not once per forward
        return _decode_chunk(stack, all_ids, rows, protocol, stopper, layout, row_ids, tags, runs)


@dataclass(frozen=True)
class _Layout:
    """Which sample a chunk's batch entries stand for, and how its cache holds the prompt."""

    merge: bool
    """Rows whose tokens agree share an entry (a node of the sample tree)."""
    keep_rows: bool
    """Entry ``i`` is row ``i`` in every forward, prefill included (each row prefills its own prompt copy)."""
    cascade: bool
    """Every attention runs fused and rows are not kept: after the prefill the cache reads each prompt's keys in
    place for its rows (no K-fold copy; :meth:`~reachlens.engine.kv_cache.SlotKVCache.share`), each row's generated
    keys in one contiguous buffer grown a block at a time, as attention reads them. (With ``keep_rows`` the cache
    stays one ``max_len`` buffer per layer, read as a strided slice: one contiguous buffer per row measured no
    faster there, benchmarks/README.md.)"""

    def share_cache(self, cache, roots: int, rows: int, greedy: np.ndarray) -> None:
        """After the prefill of ``roots`` entries: hand the cache its layout for ``rows`` rows. Rows that may fork
        read their prompt's keys in place; rows that cannot (greedy rows under merging, one row per root) each open
        their own buffer with their prompt's keys."""
        if self.cascade:
            cache.share(np.arange(roots), forks=not greedy.all() if self.merge else rows > roots)


def _decode_chunk(stack: LayerStack, all_ids: list[list[int]], rows: list[Row], protocol: Protocol,
                  stopper: StopChecker, layout: _Layout, row_ids: tuple[int, ...] | None,
                  tags: Sequence[Hashable] | None, runs: _ChunkRuns | None) -> list[Completion]:
    device = stack.device
    n = len(rows)
    row_ids = tuple(range(n)) if row_ids is None else row_ids
    tags = [r.tag for r in rows] if tags is None else tags
    pad_id = _pad_id(stack.model)
    runs = _ChunkRuns.plain(stack.identity, n) if runs is None else runs
    start_slot, prompts, shared = _roots(rows, runs, not layout.keep_rows)
    ids, valid, positions = _prefill_inputs([all_ids[p] for p in prompts], pad_id, device)
    tree = SampleTree(start_slot, ids.shape[0], protocol.max_new_tokens, stopper, share=not layout.keep_rows,
                      merge=layout.merge, pad_id=pad_id)
    padded = not bool(valid.all())
    cache = stack.new_cache(ids.shape[1] + protocol.max_new_tokens, runs.entry_routes(tree.slot_host, ids.shape[0]),
                            grow=layout.cascade)

    def forward(inputs, pos, mask, step):
        n_entries = int(inputs.shape[0])
        where = BatchRows(torch.tensor(tree.slot_host), row_ids, tags, n_entries, step, runs.arms,
                          None if runs.arm_of_row is None else torch.from_numpy(runs.arm_of_row),
                          valid if step < 0 else None, runs.luts, row_host=tree.slot_host.copy(),
                          arm_host=runs.arm_of_row)
        with _rows(where):
            return stack.forward(inputs, position_ids=pos, attention_mask=mask, cache=cache,
                                 route=runs.entry_routes(tree.slot_host, n_entries), last_only=True,
                                 shared=shared if step < 0 else None)[:, -1]

    logits = forward(ids, positions, valid if padded else None, -1)
    seeds, greedy = _seeds(rows, device)
    layout.share_cache(cache, ids.shape[0], n, greedy)
    key_valid, next_pos = _slot_state(valid, positions, protocol.max_new_tokens)
    workspace = Workspace()

    for step in range(protocol.max_new_tokens):
        live = tree.live_host
        chosen, logp = _choose(logits, tree.slot_host[live], seeds.index_select(0, to_device(live, device)),
                               greedy[live], step, protocol, workspace)
        before = int(live.size)
        move = tree.advance(*_to_host(chosen, logp))  # the step's one host read
        after = 0 if tree.done else int(tree.live_host.size)
        stopped = before - int(tree.live_host.size)  # by EOS or a stop string (at the last step the rest: by length)
        decode_step(before, before - after, stopped * (protocol.max_new_tokens - step - 1))
        if move.done:
            break
        key_valid, next_pos = _move_rows(cache, move, key_valid, next_pos)
        logits = forward(to_device(move.inputs_host, device)[:, None], next_pos[:, None],
                         key_valid[:, : cache.length + 1] if padded else None, step)
        next_pos = next_pos + 1
    return _completions(tree, tokenizer_of(stack.model), stopper, n)


def _pad_id(model) -> int:
    pad_id = tokenizer_of(model).pad_token_id
    return 0 if pad_id is None else int(pad_id)


def _seeds(rows: list[Row], device: torch.device) -> tuple[Int[Tensor, "rows"], np.ndarray]:
    """Each row's seed (0 for a greedy row) on the device, where its uniforms are drawn, and whether it decodes
    greedily (on the host)."""
    seeds = to_device(np.array([0 if r.seed is None else r.seed for r in rows], dtype=np.int64), device)
    return seeds, np.array([r.seed is None for r in rows], dtype=bool)


def _completions(tree: SampleTree, tok, stopper: StopChecker, n: int) -> list[Completion]:
    """Each row's completion: its tokens, their text (EOS left out, cut at a stop string), why it stopped."""
    token_lists = [tree.row_tokens(r) for r in range(n)]
    decoded = [tuple(t[:-1] if tree.reasons[r] == "eos" else t) for r, t in enumerate(token_lists)]
    # rows of a sample tree often end with the same tokens: each distinct list is decoded (and cut) once
    distinct = list(dict.fromkeys(decoded))
    text_of = dict(zip(distinct, (stopper.cut(t) for t in tok.batch_decode([list(d) for d in distinct],
                                                                            skip_special_tokens=True))))
    return [
        Completion(text_of[decoded[r]], tuple(token_lists[r]), tree.reasons[r], tuple(tree.row_logprobs(r)))
        for r in range(n)
    ]
