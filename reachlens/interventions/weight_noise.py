"""Weight noise: Gaussian noise added to a model's weights (Tice et al., arXiv 2412.01784), through hooks.

A *draw* is one noised model, the same for every question: each targeted weight tensor ``W`` of the
checkpoint gets ``dW = sigma * std(W) * N``, where ``N`` has standard-normal entries (full rank) or is Tice's
low-rank (LoRA) form ``N = B A / sqrt(R)`` with ``A`` (``R x in``) and ``B`` (``out x R``) standard normal, so
each entry of ``N`` has variance 1 in both forms and one ``sigma`` grid means the same in each. (Tice et al.
draw LoRA factors with standard deviation ``sigma_LoRA = R^(1/4) sqrt(sigma)`` under LoRA's ``1/R`` scaling:
the same ``dW`` with ``sigma`` absolute; here ``sigma`` is relative to each tensor's own ``std(W)``, so one grid
fits a 1.6M and a 7B model.) ``N`` depends on (seed, draw, tensor name) alone, not on ``sigma``: draw ``j`` at
every ``sigma`` is one direction scaled (common random numbers across the grid, as Tice et al.'s seeded sweeps),
drawn with the engine's counter-based normals (:func:`~reachlens.engine.rng.counter_normals`): the same on any
machine and device. ``sigma = 0`` adds exact zeros.

Targets (``targets=``, :func:`~reachlens.interventions.linear_sites.resolve_targets`): by default every linear
map of every block, attention q, k, v, o and the MLP's gate, up and down projections (``attn+mlp``), the
matrices LoRA adapts and Tice's low-rank noise went into; where the checkpoint keeps q, k, v (gate, up) as one
tensor, that tensor is noised whole. Embeddings, norms, biases and the LM head are left clean: the head
(``unembed``) can be added on a model whose head is its own tensor.

How: never by editing a parameter. For a linear map ``y = x W^T`` the noised map is ``y + x dW^T``: one hook
records ``x`` at the map's ``hook_in``, another adds ``x dW^T`` at its ``hook_out``
(:mod:`~reachlens.interventions.linear_sites`), on every forward (prefill and each decoding step), on the generic
and the fused path alike. :func:`weight_noise_arms` makes each draw an arm (``Row.arm``), so many draws decode
beside the greedy deployment in one batch; :func:`weight_noise_deltas` gives a draw's ``dW`` by checkpoint
tensor name, so a candidate can be checked against plain HuggingFace with the weights edited.

Cost: a full-rank draw holds one float32 copy of the targeted weights for as long as its hooks live (the zoo's
6 MB; a 7B model's 28 GB), so use ``rank=R`` on a large model: a draw then holds ``R * (in + out)`` numbers per
map. A model keeps the draws' ``N`` it has drawn (up to 1 GiB) for the next hook set, and the entries of all
draws go through one batched product per map and forward (the entries of each draw gathered, padded to the
largest), so many draws cost about one extra pass of the targeted maps over the batch, not one call per draw. Numerics: ``x dW^T`` is computed in float32 and added to the map's output, which equals the map run with
``W + dW`` to float32 rounding (about 1e-6 relative), not bit for bit.

>>> draws = weight_noise_draws([0.01, 0.02], k=5, seed=0)  # doctest: +SKIP
>>> rows = [Row(q, tag=(qid, None))] + [Row(q, tag=(qid, j), arm=d) for j, d in enumerate(draws)]  # doctest: +SKIP
>>> with model.hooks(fwd_hooks=weight_noise_arms(model, draws)):  # doctest: +SKIP
...     outs = generate(model, prompts, rows, Protocol.greedy(task))
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

import torch
from jaxtyping import Float
from torch import Tensor

from reachlens.engine.hooks import FwdHook, arm_index, current_rows, keyed_arms, per_arm, row_agnostic
from reachlens.engine.rng import counter_normals
from reachlens.errors import ReachlensError
from reachlens.interventions.linear_sites import LinearSite, checkpoint_tensor, linear_sites, resolve_targets

__all__ = ["MAX_SIGMA", "WeightNoise", "draw_bytes", "weight_noise", "weight_noise_arms", "weight_noise_deltas",
           "weight_noise_draws"]

_CHUNK = 1 << 22
"""Normals drawn per call of the counter-based generator (bounds its float64 scratch)."""


MAX_SIGMA = 1e3
"""The largest sigma: noise a thousand times each weight's spread. Measured on the zoo's base (``probe zoo:base
--task arith --n 3``, sigma 1 ... 1e38, one draw each): sigma 1e6 still decodes text, 1e12 and above decode every
candidate empty (the float32 products overflow)."""


@dataclass(frozen=True)
class WeightNoise:
    """One draw of weight noise: one noised model. Hashable, so a draw is its own arm (``Row.arm``)."""

    sigma: float
    """The noise's standard deviation over each tensor's own ``std(W)`` (>= 0)."""
    draw: int = 0
    """Which draw (>= 0): draw ``j`` is the same direction at every ``sigma``."""
    seed: int = 0
    """The stream of draws (a run's seed)."""
    rank: int | None = None
    """None: full-rank noise; ``R``: Tice's low-rank form (``B A / sqrt(R)``), cheap on a large model."""
    targets: str = "attn+mlp"
    """The linear maps noised (:func:`~reachlens.interventions.linear_sites.resolve_targets`)."""

    def __post_init__(self) -> None:
        if isinstance(self.sigma, bool) or not isinstance(self.sigma, (int, float)) or not (
            math.isfinite(self.sigma) and self.sigma >= 0
        ):
            raise ReachlensError(f"weight noise sigma={self.sigma!r} must be a finite number >= 0")
        if self.sigma > MAX_SIGMA:
            raise ReachlensError(f"weight noise sigma={self.sigma!r} is more than {MAX_SIGMA:g} times each weight's "
                                 f"own spread, where nothing of the model is left (past about 1e12 every candidate "
                                 f"decodes empty); use sigma <= {MAX_SIGMA:g}")
        for name, value in (("draw", self.draw), ("seed", self.seed)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ReachlensError(f"weight noise {name}={value!r} must be an integer >= 0")
        if self.rank is not None and (isinstance(self.rank, bool) or not isinstance(self.rank, int) or self.rank < 1):
            raise ReachlensError(f"weight noise rank={self.rank!r} must be an integer >= 1 (or None: full rank)")
        resolve_targets(self.targets)

    @property
    def label(self) -> str:
        """The draw's name in tables: ``weight_noise:sigma=0.01:draw=3`` (``:rank=8`` for the low-rank form)."""
        rank = "" if self.rank is None else f":rank={self.rank}"
        return f"weight_noise:sigma={self.sigma:g}:draw={self.draw}{rank}"

    @property
    def unit(self) -> tuple[int, int, int | None]:
        """What fixes ``N`` (not ``sigma``): draws sharing it differ only in scale."""
        return (self.seed, self.draw, self.rank)


def weight_noise_draws(
    sigmas: Sequence[float], k: int, *, seed: int = 0, rank: int | None = None, targets: str = "attn+mlp"
) -> tuple[WeightNoise, ...]:
    """The grid: ``k`` draws at each ``sigma``, sigma-major (candidate ``i`` is sigma ``i // k``, draw ``i % k``).

    >>> [d.label for d in weight_noise_draws([0.01, 0.02], k=2)]
    ['weight_noise:sigma=0.01:draw=0', 'weight_noise:sigma=0.01:draw=1', 'weight_noise:sigma=0.02:draw=0', 'weight_noise:sigma=0.02:draw=1']
    """
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ReachlensError(f"k={k!r} draws per sigma must be an integer >= 1")
    if not sigmas:
        raise ReachlensError("weight noise needs at least one sigma")
    return tuple(WeightNoise(s, j, seed, rank, targets) for s in sigmas for j in range(k))


def _tensor_seed(unit: tuple[int, int, int | None], name: str) -> int:
    seed, draw, _ = unit
    digest = hashlib.sha256(f"weight_noise\x1f{seed}\x1f{draw}\x1f{name}".encode()).digest()
    return int.from_bytes(digest[:4], "little")


def _normals(seed: int, start: int, n: int) -> Float[Tensor, "n"]:
    """Counter-based standard normals ``start .. start + n - 1`` of stream ``seed``, float32 on the CPU."""
    if start + n > 2**31 - 1:
        raise ReachlensError(f"a weight tensor of {n} entries is past the noise generator's 2**31 counters; use rank=R")
    seeds = torch.tensor([seed])
    parts = [counter_normals(seeds, torch.arange(a, min(a + _CHUNK, start + n))[None])[0].float()
             for a in range(start, start + n, _CHUNK)]
    return torch.cat(parts) if parts else torch.zeros(0)


@dataclass(frozen=True)
class _Unit:
    """``N`` of one tensor for one draw, in ``[out, in]`` layout: ``full`` or the factors ``b @ a``."""

    full: Tensor | None = None
    b: Tensor | None = None
    a: Tensor | None = None

    def dense(self) -> Float[Tensor, "out in"]:
        return self.full if self.full is not None else self.b @ self.a

    def rows(self, rows: Tensor | None) -> _Unit:
        if rows is None:
            return self
        return _Unit(self.full[rows], None, None) if self.full is not None else _Unit(None, self.b[rows], self.a)


def _unit_noise(site: LinearSite, shape: torch.Size, unit: tuple[int, int, int | None]) -> _Unit:
    """``N`` of the checkpoint tensor ``site.param`` (HF ``shape``) for ``unit``, in ``[out, in]`` layout."""
    seed = _tensor_seed(unit, site.param)
    n_out, n_in = (shape[1], shape[0]) if site.transposed else (shape[0], shape[1])
    rank = unit[2]
    if rank is None:
        z = _normals(seed, 0, n_out * n_in).view(shape)  # counters in the checkpoint's own layout
        return _Unit(full=z.T if site.transposed else z)
    a = _normals(seed, 0, rank * n_in).view(rank, n_in)
    b = _normals(seed, rank * n_in, n_out * rank).view(n_out, rank) / math.sqrt(rank)
    return _Unit(b=b, a=a)


def _std(model, name: str) -> float:
    cache = model.__dict__.setdefault("_reachlens_weight_std", {})
    if name not in cache:
        cache[name] = float(checkpoint_tensor(model, name).detach().double().std())
    return cache[name]


def draw_bytes(model, targets: str = "attn+mlp", rank: int | None = None) -> int:
    """Bytes of noise one draw holds while it decodes, by arithmetic on the targeted tensors' shapes (nothing is
    drawn): its ``N`` of each checkpoint tensor (float32; full rank ``out x in``, low rank ``R x (in + out)``) and
    the copy stacked for each linear map (:class:`_Stack`). A run holds every draw of its slices at once."""
    total, seen = 0, set()
    for site in linear_sites(model, targets):
        shape = checkpoint_tensor(model, site.param).shape
        if site.param not in seen:
            seen.add(site.param)
            total += shape[0] * shape[1] if rank is None else rank * (shape[0] + shape[1])
        total += site.in_features * site.out_features if rank is None else rank * (site.in_features + site.out_features)
    return 4 * total


def weight_noise_deltas(model, noise: WeightNoise) -> dict[str, Float[Tensor, "..."]]:
    """``dW`` of the draw ``noise``, by checkpoint tensor name (the names of the checkpoint's own state_dict),
    float32 on each weight's device, in the checkpoint's own layout: a HuggingFace model of the same checkpoint
    with each ``W += dW`` is the noised model the draw's hooks run.

    >>> deltas = weight_noise_deltas(model, WeightNoise(0.01, draw=3))  # doctest: +SKIP
    >>> sorted(deltas)[0]  # doctest: +SKIP
    'model.layers.0.mlp.down_proj.weight'
    """
    out: dict[str, Tensor] = {}
    for site in linear_sites(model, noise.targets):
        if site.param in out:
            continue
        w = checkpoint_tensor(model, site.param)
        n = _unit_noise(site, w.shape, noise.unit).dense()
        delta = (noise.sigma * _std(model, site.param)) * (n.T if site.transposed else n)
        out[site.param] = delta.contiguous().to(w.device)
    return out


@dataclass(frozen=True)
class _Gather:
    """One forward's entries laid out by ``N``: ``index[u, j]`` is the ``j``-th entry that runs unit ``units[u]``
    (padding: the entry count, a zero row), ``sigma[u, j]`` its sigma (0 on padding)."""

    units: Tensor
    index: Tensor | None
    sigma: Tensor
    every: bool
    """Every unit of the plan, in order (the stacked ``N`` is used as it is, not gathered)."""


class _Plan:
    """The draws one hook set serves: per arm, which ``N`` it uses and its sigma; per forward, where each entry goes."""

    def __init__(self, keys: tuple[Hashable, ...] | None, draws: Sequence[WeightNoise]) -> None:
        self.keys = keys
        self.units = list(dict.fromkeys(d.unit for d in draws))
        self.unit_of_arm = torch.tensor([self.units.index(d.unit) for d in draws] + [-1], dtype=torch.long)
        self.sigma_of_arm = torch.tensor([float(d.sigma) for d in draws] + [0.0], dtype=torch.float64)
        self._last: tuple = (None, None)
        self._on_device: dict = {}

    def on(self, device: torch.device, t: Tensor) -> Tensor:
        """``t`` (a tensor of this forward's layout) on ``device``: one copy per forward."""
        key = (id(t), device)
        if key not in self._on_device:
            self._on_device[key] = t.to(device)
        return self._on_device[key]

    def gather(self) -> _Gather | None:
        """This forward's entries by unit (None: no entry runs a draw of this plan). Keys None: the one draw on
        every entry (``index`` None)."""
        if self.keys is None:
            return _Gather(torch.zeros(1, dtype=torch.long), None, self.sigma_of_arm[:1], True)
        idx = arm_index(self.keys, "cpu")  # outside a generate call: a one-line ReachlensError
        rows = current_rows()
        if self._last[0] is rows:
            return self._last[1]
        found = None
        if idx is not None:
            unit = self.unit_of_arm[idx]  # a free slot's and another arm's -1 reads the trailing -1
            used = unit >= 0
            entries = used.nonzero().squeeze(1)
            order = torch.argsort(unit[entries], stable=True)
            entries, units_sorted = entries[order], unit[entries][order]
            present, counts = torch.unique_consecutive(units_sorted, return_counts=True)
            width = int(counts.max())
            index = torch.full((len(present), width), len(idx), dtype=torch.long)
            sigma = torch.zeros((len(present), width), dtype=torch.float64)
            starts = torch.cumsum(counts, 0) - counts
            col = torch.arange(len(entries)) - torch.repeat_interleave(starts, counts)
            slot = torch.repeat_interleave(torch.arange(len(present)), counts)
            index[slot, col] = entries
            sigma[slot, col] = self.sigma_of_arm[idx[entries]]
            every = len(present) == len(self.units)
            found = _Gather(present, index, sigma, every)
        self._last, self._on_device = (rows, found), {}
        return found


@dataclass(frozen=True)
class _Stack:
    """``N^T`` of every unit of a plan for one linear map, stacked for a batched product: ``full`` ``[U, in,
    out]``, or the low-rank factors ``a`` ``[U, in, R]`` and ``b`` ``[U, R, out]`` (``x N^T = (x a) b``)."""

    full: Tensor | None = None
    a: Tensor | None = None
    b: Tensor | None = None

    @classmethod
    def of(cls, units: Sequence[_Unit]) -> _Stack:
        if units[0].full is not None:
            return cls(full=torch.stack([u.full.T for u in units]).contiguous())
        return cls(a=torch.stack([u.a.T for u in units]).contiguous(), b=torch.stack([u.b.T for u in units]).contiguous())

    def to(self, device: torch.device) -> _Stack:
        move = (lambda t: None if t is None else t.to(device))
        return _Stack(move(self.full), move(self.a), move(self.b))

    def apply(self, x: Float[Tensor, "u m d_in"], units: Tensor | None) -> Float[Tensor, "u m d_out"]:
        """``x[u] N_{units[u]}^T`` in float32 (``units`` None: every unit in order)."""
        pick = (lambda t: t) if units is None else (lambda t: t.index_select(0, units))
        x = x.float()
        if self.full is not None:
            return torch.bmm(x, pick(self.full))
        return torch.bmm(torch.bmm(x, pick(self.a)), pick(self.b))


def _site_hooks(site: LinearSite, plan: _Plan, stack: _Stack, std: float) -> list[FwdHook]:
    """The two hooks of one linear map: record ``x`` at its input, add ``x dW^T`` to its output. The entries of
    each unit are gathered into one batched product (``[U, entries x pos, in] @ [U, in, out]``), scaled by each
    entry's sigma and added back: one product per map and forward, whatever the number of draws."""
    stash: list = []
    on_device: dict = {}

    def stacked(device: torch.device) -> _Stack:
        if device not in on_device:
            on_device[device] = stack.to(device)
        return on_device[device]

    def capture(x: Tensor, *, hook) -> None:
        found = plan.gather()
        stash[:] = [(x, found)] if found is not None else []

    def add(y: Tensor, *, hook) -> Tensor | None:
        if not stash:
            return None
        x, g = stash.pop()
        b, pos = y.shape[:2]
        xf, out = x.reshape(b, pos, -1), y.reshape(b, pos, -1)
        n = stacked(y.device)
        units = None if g.every else plan.on(y.device, g.units)
        if g.index is None:  # one draw on every entry
            delta = n.apply(xf.reshape(1, b * pos, -1), units).view(b, pos, -1)
            return (out + (delta * float(g.sigma[0] * std)).to(out.dtype)).view(y.shape)
        index = plan.on(y.device, g.index)
        u, w = index.shape
        padded = torch.cat([xf, xf.new_zeros(1, pos, xf.shape[-1])])
        delta = n.apply(padded[index.view(-1)].view(u, w * pos, -1), units).view(u * w, pos, -1)
        delta = delta * (plan.on(y.device, g.sigma) * std).float().view(u * w, 1, 1)
        out = torch.cat([out, out.new_zeros(1, pos, out.shape[-1])]).index_add(0, index.view(-1), delta.to(out.dtype))
        return out[:b].view(y.shape)

    mark = row_agnostic if plan.keys is None else per_arm(plan.keys)
    return [(site.hook_in, mark(capture)), (site.hook_out, mark(add))]


_CACHE_BYTES = 1 << 30
"""Most bytes of drawn ``N`` a model keeps between hook sets (a probe run builds one per slice)."""


def _units(model, site: LinearSite, shape: torch.Size, units: Sequence[tuple[int, int, int | None]]) -> list[_Unit]:
    """``N`` of ``site.param`` for each unit, drawn once per model while they fit :data:`_CACHE_BYTES`."""
    cache = model.__dict__.setdefault("_reachlens_weight_noise", {})
    out = []
    for unit in units:
        key = (site.param, unit)
        n = cache.get(key)
        if n is None:
            n = _unit_noise(site, shape, unit)
            size = sum(t.numel() * 4 for t in (n.full, n.a, n.b) if t is not None)
            held = cache.setdefault("_bytes", 0)
            if held + size <= _CACHE_BYTES:
                cache[key], cache["_bytes"] = n, held + size
        out.append(n)
    return out


def _hooks(model, keys: tuple[Hashable, ...] | None, draws: Sequence[WeightNoise]) -> list[FwdHook]:
    """One hook set for draws of the same targets: two hooks per linear map, each ``N`` drawn once per tensor."""
    plan = _Plan(keys, draws)
    hooks: list[FwdHook] = []
    for site in linear_sites(model, draws[0].targets):
        units = _units(model, site, checkpoint_tensor(model, site.param).shape, plan.units)
        hooks += _site_hooks(site, plan, _Stack.of([n.rows(site.rows) for n in units]), _std(model, site.param))
    return hooks


def weight_noise(model, noise: WeightNoise, *, arm: Hashable = None) -> list[FwdHook]:
    """``fwd_hooks`` that run every row (``arm=None``) or one arm's rows with the weights of draw ``noise``.

    >>> with model.hooks(fwd_hooks=weight_noise(model, WeightNoise(0.01, draw=3))):  # doctest: +SKIP
    ...     outs = generate(model, prompts, rows, protocol)
    """
    if not isinstance(noise, WeightNoise):
        raise ReachlensError(f"{noise!r} is not a WeightNoise")
    return _hooks(model, None if arm is None else (arm,), [noise])


def weight_noise_arms(model, draws: Sequence[WeightNoise] | Mapping[Hashable, WeightNoise]) -> list[FwdHook]:
    """``fwd_hooks`` for many draws as arms: a sequence makes each draw its own arm key (``Row(..., arm=draw)``),
    a mapping names the arm of each draw. Draws of different ``targets`` or ``rank`` get a hook set each.

    Raises:
        ReachlensError: no draws, an arm key None, a value that is not a WeightNoise.
    """
    keyed = keyed_arms(draws, WeightNoise, caller="weight_noise_arms", item="draw", arm="weight-noise",
                       itself="the draw itself")
    hooks: list[FwdHook] = []
    for kind in dict.fromkeys((d.targets, d.rank) for _, d in keyed):  # one batched product per kind of N
        group = [(key, d) for key, d in keyed if (d.targets, d.rank) == kind]
        hooks += _hooks(model, tuple(key for key, _ in group), [d for _, d in group])
    return hooks
