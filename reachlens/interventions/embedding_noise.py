"""Embedding noise: Gaussian noise on the prompt's input embeddings, in the prefill only.

The probe of random soft prompts (arXiv 2605.11936): each draw adds to the token embedding ``e_t``
of every prompt token a Gaussian vector with per-component standard deviation
``ratio * |e_t| / sqrt(d)``, so its expected norm is ``ratio * |e_t|`` (the *norm ratio*). The
greedy decode that follows reads the perturbed prompt's cache; generated tokens are embedded
unperturbed. A draw is a pure function of its :class:`EmbeddingNoise` (seed per question and
candidate: :func:`~reachlens.engine.rng.intervention_seed`): token ``t`` of the prompt (counted from
its first real token, so left padding changes nothing) uses counters ``t * d .. t * d + d - 1`` of
:func:`~reachlens.engine.rng.counter_normals`.

Site: the family's own token-embedding hook, TransformerLens' ``hook_embed`` (the bridge's
``embed.hook_out``). On Gemma that output already carries the family's ``sqrt(d_model)`` scale (it is
the first block's input); the noise is relative to the norm at the site, so the ratio means the same
on every family. On GPT-2 the learned position embedding is added after it, unperturbed.

>>> noise = EmbeddingNoise(0.1, seed=intervention_seed(0, "arith-test-00007", 4))  # doctest: +SKIP
>>> with model.hooks(fwd_hooks=embedding_noise_arms(model, [noise])):  # doctest: +SKIP
...     outs = generate(model, prompts, [Row(0), Row(0, arm=noise)], Protocol.greedy(task))
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from reachlens.engine.hooks import FwdHook, HookFn, keyed_arms, per_arm, row_agnostic
from reachlens.engine.rng import counter_normals
from reachlens.errors import ReachlensError
from reachlens.interventions.graft import prefill_entries

__all__ = ["EMBED_SITE", "EmbeddingNoise", "embedding_noise", "embedding_noise_arms", "embedding_noise_values"]

EMBED_SITE = "hook_embed"
"""TransformerLens' token-embedding hook."""


@dataclass(frozen=True)
class EmbeddingNoise:
    """One draw of embedding noise. Hashable, so a draw is its own arm (``Row.arm``)."""

    ratio: float
    """Expected norm of the noise over the norm of each token's embedding (> 0)."""
    seed: int = 0
    """The draw; see :func:`~reachlens.engine.rng.intervention_seed`."""

    def __post_init__(self) -> None:
        if isinstance(self.ratio, bool) or not isinstance(self.ratio, (int, float)) or not (
            math.isfinite(self.ratio) and self.ratio > 0
        ):
            raise ReachlensError(f"embedding noise ratio={self.ratio!r} must be a finite number > 0")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise ReachlensError(f"embedding noise seed={self.seed!r} must be an integer")

    @property
    def label(self) -> str:
        """The arm's name in tables: ``embedding_noise:0.1``."""
        return f"embedding_noise:{self.ratio:g}"


def embedding_noise_values(
    embeddings: Float[Tensor, "m pos d"], prompt_mask: Bool[Tensor, "m pos"], seeds: Int[Tensor, "m"],
    ratios: Float[Tensor, "m"],
) -> Float[Tensor, "m pos d"]:
    """The noise each row's draw adds (float32; zero at left padding), from its embeddings' norms."""
    m, width, d = embeddings.shape
    first = width - prompt_mask.sum(-1, keepdim=True)
    token = (torch.arange(width, device=embeddings.device)[None] - first).clamp(min=0)
    counters = token[..., None] * d + torch.arange(d, device=embeddings.device)
    z = counter_normals(seeds.to(embeddings.device), counters)
    scale = ratios.to(embeddings.device, torch.float64)[:, None, None] * embeddings.double().norm(dim=-1, keepdim=True)
    return torch.where(prompt_mask[..., None], z * scale / math.sqrt(d), 0.0).float()


def _noise_hook(keys: tuple[Hashable, ...] | None, draws: list[EmbeddingNoise]) -> HookFn:
    seeds = torch.tensor([n.seed for n in draws], dtype=torch.long)
    ratios = torch.tensor([float(n.ratio) for n in draws], dtype=torch.float64)

    def add(tensor: Float[Tensor, "batch pos d"], *, hook) -> Float[Tensor, "batch pos d"] | None:
        found = prefill_entries(keys, tensor.shape[0])
        if found is None:
            return None
        rows, ent, which = found
        ent_d = ent.to(tensor.device)
        mask = rows.prompt_mask.to(tensor.device)[ent_d]
        noise = embedding_noise_values(tensor[ent_d], mask, seeds[which], ratios[which])
        out = tensor.clone()
        out[ent_d] = (tensor[ent_d].float() + noise).to(tensor.dtype)
        return out

    return row_agnostic(add) if keys is None else per_arm(keys)(add)


def _site(model) -> str:
    if EMBED_SITE not in getattr(model, "hook_dict", {}):
        raise ReachlensError(f"{type(model).__name__} has no {EMBED_SITE!r} hook; load the model with reachlens.load_model")
    return EMBED_SITE


def embedding_noise(model, noise: EmbeddingNoise, *, arm: Hashable = None) -> list[FwdHook]:
    """``fwd_hooks`` that add ``noise`` to the prompt embeddings of every row (``arm=None``) or of
    one arm's rows, in the prefill.

    >>> with model.hooks(fwd_hooks=embedding_noise(model, EmbeddingNoise(0.1, seed=3))):  # doctest: +SKIP
    ...     outs = generate(model, prompts, rows, protocol)
    """
    return [(_site(model), _noise_hook(None if arm is None else (arm,), [noise]))]


def embedding_noise_arms(model, draws: Sequence[EmbeddingNoise] | Mapping[Hashable, EmbeddingNoise]) -> list[FwdHook]:
    """``fwd_hooks`` for many draws as arms, in one hook: a sequence makes each draw its own arm key
    (``Row(..., arm=draw)``); a mapping names the arm of each draw.

    Raises:
        ReachlensError: no draws, an arm key None, a value that is not an EmbeddingNoise.
    """
    keyed = keyed_arms(draws, EmbeddingNoise, caller="embedding_noise_arms", item="draw", arm="noise",
                       itself="the draw itself")
    return [(_site(model), _noise_hook(tuple(k for k, _ in keyed), [n for _, n in keyed]))]
