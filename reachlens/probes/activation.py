"""The activation probes: grafts, embedding noise, steering. Interventions, not decoding methods.

Each candidate is a greedy decode of the question's prompt with one intervention as its *arm*
(:attr:`reachlens.engine.Row.arm`); every arm of a slice of questions decodes in one engine call beside the
greedy deployment (:func:`reachlens.runner.decode.decode_rows`), prefix sharing on (the hooks are per-arm).

* ``graft`` (:mod:`reachlens.interventions.graft`): at each ``layer`` and of each ``kind``, replace the site's
  activation at one prompt position (the last by default) in the prefill only; ``k`` draws of a random kind
  (noise, direction, permute), one of the others. ``placebo=true`` puts the same grafts at a seeded random
  prompt position instead (neither the first token nor the last): the control a recovery rate must beat.
  Positions index the prompt's ids as the model reads them: under a chat format the rendered template's own
  tokens count (the last is the generation prompt's end, the position whose output is the answer's first token).
* ``embedding_noise`` (:mod:`reachlens.interventions.embedding_noise`): ``k`` draws of Gaussian noise on the
  prompt's input embeddings at norm ratio ``ratio``, in the prefill.
* ``steer`` (:mod:`reachlens.interventions.steering`): add ``alpha * v`` at ``site`` of block ``layer`` at
  every position of every forward, one candidate per alpha. ``v`` is a unit vector: ``direction=random``
  draws it from the seed (one direction for every question), ``direction=PATH.npy`` reads it (normalized):
  once per run, in the driver, its SHA-256 recorded in the run's identity (:meth:`SteerProbe.read_inputs`), so a
  resume with another file is refused. Alphas are in the site's own units.

Bounds, checked when a probe is made: a noise ratio of at most :data:`MAX_NOISE_RATIO` and alphas of at most
:data:`MAX_ALPHA` (beyond them the intervention drowns the prompt: every candidate is the same noise); ``k`` and
``seed`` only where they draw something (a graft of random kinds or a placebo, a random steering direction).

Seeds: candidate ``c`` of a question ``q`` draws with :func:`~reachlens.engine.rng.intervention_seed`
``(seed, q, c)`` (the run's seed unless the probe names one), so a candidate depends on (seed, question,
candidate index) alone, whatever else is decoded beside it.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from reachlens.engine import counter_normals, encode, intervention_seed
from reachlens.errors import ReachlensError
from reachlens.execution import ExecConfig
from reachlens.grading import grade_completion, question_grader
from reachlens.interventions import (
    GRAFT_KINDS,
    RANDOM_KINDS,
    EmbeddingNoise,
    FwdHook,
    Graft,
    embedding_noise_arms,
    graft_arms,
    read_direction,
    steering_grid,
    steering_site,
)
from reachlens.probes.bank import GREEDY, bank_row
from reachlens.probes.spec import Probe, register_probe
from reachlens.protocol import Protocol
from reachlens.records import candidate_row
from reachlens.runner.decode import decode_rows, question_slices
from reachlens.tasks.base import Question, Task
from reachlens.tasks.chat import render_prompts

__all__ = ["MAX_ALPHA", "MAX_NOISE_RATIO", "ArmCandidate", "ArmGroup", "ArmProbe", "EmbeddingNoiseProbe", "GraftProbe",
           "SteerProbe", "arm_hooks"]

MAX_NOISE_RATIO = 10.0
"""The largest ``embedding_noise`` ratio: at ten times each token embedding's norm the prompt is noise alone (every
candidate the same noise's decode, whatever the question)."""
MAX_ALPHA = 1e4
"""The largest steering ``|alpha|`` (the site's own units, a unit direction): beyond the residual norms of the models
reachlens runs, so the direction drowns every activation and every alpha decodes alike; float16 ends at 65504."""


@dataclass(frozen=True)
class ArmCandidate:
    """One candidate of an activation probe on one question: the arm its row runs."""

    candidate_idx: int
    arm: str
    """The arm's name in tables (``graft:zero@L3``, ``placebo:graft:zero@L3``, ``steer:resid_post@L2:alpha=4``,
    ``steer:resid_post@L2:direction=v.npy:alpha=4``); a probe's own seed is named (``:seed=1``), so that the arms of
    two probes of a run never share a name."""
    key: Hashable
    """The row's arm key (what the hooks serve)."""
    value: Any
    """The intervention (a Graft, an EmbeddingNoise, an alpha)."""
    detail: str = ""
    """What varies per question (a placebo's position), for the bank's ``detail`` column."""


class ArmProbe(Probe):
    """An activation probe: candidates are arms decoded greedily beside the deployment (by a run's unit 0,
    :class:`ArmGroup`). A family is one subclass: its keys, :meth:`candidates` and :meth:`hooks`."""

    intervention = True

    def candidates(self, question_id: str, n_tokens: int, seed: int) -> list[ArmCandidate]:
        """This probe's candidates on one question whose prompt has ``n_tokens`` tokens."""
        raise NotImplementedError

    def check_prompt(self, question_id: str, n_tokens: int) -> None:
        """Refuse a prompt of ``n_tokens`` tokens this probe cannot act on (called with the task's shortest prompt
        before the model loads, and by :meth:`candidates`). Any length, by default."""

    def arms(self) -> list[str]:
        """The names of this probe's arms (its candidates' ``arm``, which depend on neither question nor seed)."""
        return list(dict.fromkeys(c.arm for c in self.candidates("q", 1 << 20, 0)))

    def hooks(self, model, keyed: Mapping[Hashable, Any], protocol: Protocol) -> list[FwdHook]:
        """``fwd_hooks`` serving the arms ``keyed`` (key -> value) of candidates of this probe (and, for a
        family with :attr:`shared_hooks`, of every probe of the family)."""
        raise NotImplementedError

    shared_hooks = False
    """Whether one call of :meth:`hooks` serves the arms of every probe of the family (keys unique per value)."""


def _seeded(seed: int | None) -> str:
    """An arm name's suffix for a probe that names its own seed, so that its arms stay apart from another
    probe's with the run's seed (arms are pooled by name in the reach tables)."""
    return "" if seed is None else f":seed={seed}"


def _placebo_position(seed: int, question_id: str, candidate_idx: int, n_tokens: int) -> int:
    """A seeded prompt position, neither the first token nor the last (a prompt of >= 3 tokens:
    :meth:`GraftProbe.check_prompt`)."""
    return 1 + intervention_seed(seed, f"placebo\x1f{question_id}", candidate_idx) % (n_tokens - 2)


@register_probe
@dataclass(frozen=True, kw_only=True)
class GraftProbe(ArmProbe):
    """Activation grafts (``graft:kind=zero,noise:layer=3``): one candidate per kind, layer and draw."""

    family = "graft"
    example = "graft:kind=zero,noise:layer=3"

    kind: tuple[str, ...] = field(metadata={"help": f"graft kind(s): {', '.join(GRAFT_KINDS)}"})
    layer: tuple[int, ...] = field(metadata={"help": "the block(s) whose site is replaced"})
    site: str = field(default="resid_post", metadata={"help": "a site of one vector per position"})
    position: int = field(default=-1, metadata={"help": "prompt token replaced: -1 the last, >= 0 from the first"})
    k: int = field(default=1, metadata={"help": "draws of each random kind (noise, direction, permute)"})
    placebo: bool = field(default=False, metadata={"help": "graft at a seeded random prompt position instead"})
    seed: int | None = field(default=None, metadata={"help": "seed of the draws (none: the run's)"})

    def validate(self) -> None:
        for kind in self.kind:
            Graft(kind, layer=0)  # an unknown kind is refused naming the known ones
        if len(set(self.kind)) < len(self.kind) or len(set(self.layer)) < len(self.layer):
            raise ReachlensError(f"graft probe {self.label!r} names a kind or a layer twice; name each once")
        if self.placebo and self.position != -1:
            raise ReachlensError("a placebo graft draws its own position; drop position= (or placebo=true)")
        random = sorted(RANDOM_KINDS)
        if self.k != 1 and not RANDOM_KINDS & set(self.kind):
            raise ReachlensError(f"graft k={self.k} draws nothing: kind={','.join(self.kind)} is not random; drop k= "
                                 f"(k draws only {', '.join(random)})")
        if self.seed is not None and not self.placebo and not RANDOM_KINDS & set(self.kind):
            raise ReachlensError(f"graft seed={self.seed} draws nothing: kind={','.join(self.kind)} is not random and "
                                 f"not a placebo; drop seed= (the same graft under another label)")

    def _plan(self) -> list[tuple[str, int, int]]:
        return [(kind, layer, j) for kind in self.kind for layer in self.layer
                for j in range(self.k if kind in RANDOM_KINDS else 1)]

    @property
    def budget(self) -> int:
        """Counted, not enumerated: a budget is bounded before any candidate is made."""
        return len(self.layer) * sum(self.k if kind in RANDOM_KINDS else 1 for kind in self.kind)

    def check_prompt(self, question_id: str, n_tokens: int) -> None:
        if self.placebo and n_tokens < 3:
            raise ReachlensError(f"a placebo graft needs a prompt of at least 3 tokens (a position that is neither the "
                                 f"first nor the last); question {question_id!r} has {n_tokens}")
        if not self.placebo and not -n_tokens <= self.position < n_tokens:
            raise ReachlensError(f"graft position={self.position} is outside question {question_id!r}'s prompt of "
                                 f"{n_tokens} tokens; use -1 (the last token) or a position inside every prompt "
                                 f"({-n_tokens} to {n_tokens - 1})")

    def check(self, model, protocol: Protocol) -> None:
        graft_arms(model, [Graft(kind, layer, self.site) for kind, layer, _ in self._plan()])

    def candidates(self, question_id: str, n_tokens: int, seed: int) -> list[ArmCandidate]:
        self.check_prompt(question_id, n_tokens)
        out = []
        for c, (kind, layer, _) in enumerate(self._plan()):
            draw = intervention_seed(seed, question_id, c) if kind in RANDOM_KINDS else 0
            pos = _placebo_position(seed, question_id, c, n_tokens) if self.placebo else self.position
            graft = Graft(kind, layer, self.site, pos, draw)
            label = f"placebo:{Graft(kind, layer, self.site).label}" if self.placebo else graft.label
            out.append(ArmCandidate(c, label + _seeded(self.seed), graft, graft, f"pos={pos}" if self.placebo else ""))
        return out

    shared_hooks = True

    def hooks(self, model, keyed: Mapping[Hashable, Any], protocol: Protocol) -> list[FwdHook]:
        return graft_arms(model, dict(keyed))


@register_probe
@dataclass(frozen=True, kw_only=True)
class EmbeddingNoiseProbe(ArmProbe):
    """Gaussian noise on the prompt's input embeddings (``embedding_noise:ratio=0.1:k=4``): k draws."""

    family = "embedding_noise"
    example = "embedding_noise:ratio=0.1:k=4"

    ratio: float = field(default=0.1, metadata={"help": "expected noise norm over each token embedding's norm"})
    k: int = field(default=4, metadata={"help": "draws per question"})
    seed: int | None = field(default=None, metadata={"help": "seed of the draws (none: the run's)"})

    def validate(self) -> None:
        EmbeddingNoise(self.ratio)  # refuses a ratio that is not a finite number > 0
        if self.ratio > MAX_NOISE_RATIO:
            raise ReachlensError(f"embedding_noise ratio={self.ratio:g} drowns the prompt (noise {self.ratio:g} times "
                                 f"each embedding's norm: every candidate decodes noise alone); use ratio <= "
                                 f"{MAX_NOISE_RATIO:g}")

    @property
    def budget(self) -> int:
        return self.k

    def check(self, model, protocol: Protocol) -> None:
        embedding_noise_arms(model, [EmbeddingNoise(self.ratio)])

    def candidates(self, question_id: str, n_tokens: int, seed: int) -> list[ArmCandidate]:
        draws = [EmbeddingNoise(self.ratio, intervention_seed(seed, question_id, c)) for c in range(self.k)]
        return [ArmCandidate(c, d.label + _seeded(self.seed), d, d) for c, d in enumerate(draws)]

    shared_hooks = True

    def hooks(self, model, keyed: Mapping[Hashable, Any], protocol: Protocol) -> list[FwdHook]:
        return embedding_noise_arms(model, dict(keyed))


@register_probe
@dataclass(frozen=True, kw_only=True)
class SteerProbe(ArmProbe):
    """Steering along a unit direction over a grid of alphas (``steer:layer=2:alphas=-4,4``): every step."""

    family = "steer"
    example = "steer:layer=2:alphas=-4,4"

    layer: int = field(metadata={"help": "the block steered"})
    alphas: tuple[float, ...] = field(metadata={"help": "multiples of the unit direction added, one candidate each"})
    site: str = field(default="resid_post", metadata={"help": "a site of one vector per position"})
    direction: str = field(default="random", metadata={"help": "random (drawn from the seed) or a .npy file"})
    seed: int | None = field(default=None, metadata={"help": "seed of a random direction (none: the run's)"})
    loaded: np.ndarray | None = field(default=None, init=False, repr=False, compare=False)
    """The direction file's vector, once read (:meth:`read_inputs`): what travels to the workers."""

    def validate(self) -> None:
        if len(set(self.alphas)) < len(self.alphas):
            raise ReachlensError(f"steer alphas={self.alphas!r} names an alpha twice; name each once")
        big = [a for a in self.alphas if abs(a) > MAX_ALPHA]
        if big:
            raise ReachlensError(f"steer alpha={big[0]:g} drowns every activation (every alpha beyond the residual "
                                 f"stream's norm decodes alike); use alphas of at most {MAX_ALPHA:g} in size")
        if self.direction != "random" and not self.direction.endswith(".npy"):
            raise ReachlensError(f"steer direction={self.direction!r} must be 'random' or a .npy file of one vector")
        if self.direction != "random" and self.seed is not None:
            raise ReachlensError(f"steer seed={self.seed} draws nothing: direction={self.direction!r} is read from its "
                                 "file; drop seed= (the same steering under another label)")

    @property
    def budget(self) -> int:
        return len(self.alphas)

    def read_inputs(self) -> tuple[SteerProbe, dict[str, str]]:
        """A direction file's vector, read once (the probe holding it) and its SHA-256 (its float64 values and
        shape), by the file's path as the spec names it."""
        if self.direction == "random":
            return self, {}
        v = _read_vector(Path(self.direction))
        read = dataclasses.replace(self)
        object.__setattr__(read, "loaded", v)
        return read, {self.direction: _sha256(v)}

    def vector(self, model, seed: int) -> torch.Tensor:
        """The unit direction (float32, the site's width)."""
        _, width = steering_site(model, self.layer, self.site)
        if self.direction == "random":
            v = counter_normals(torch.tensor([intervention_seed(seed, "steer-direction", 0)]), torch.arange(width)[None])[0]
        else:
            if self.loaded is None:
                raise RuntimeError(f"steer probe {self.label!r}: its direction file is read once per run, by "
                                   "read_inputs() in the driver; decode the probe it returns")
            v = torch.from_numpy(self.loaded).double()
            if v.shape != (width,):
                raise ReachlensError(f"steer direction {self.direction!r} has shape {tuple(v.shape)}; block "
                                     f"{self.layer}'s {self.site} needs ({width},)")
        norm = v.norm()
        if not bool(torch.isfinite(norm)) or float(norm) == 0:
            raise ReachlensError(f"steer direction {self.direction!r} is zero or not finite")
        return (v / norm).float()

    def check(self, model, protocol: Protocol) -> None:
        self.vector(model, self.run_seed(protocol))

    def candidates(self, question_id: str, n_tokens: int, seed: int) -> list[ArmCandidate]:
        direction = "" if self.direction == "random" else f":direction={Path(self.direction).name}"
        arm = f"steer:{self.site}@L{self.layer}{direction}{_seeded(self.seed)}"
        return [ArmCandidate(c, f"{arm}:alpha={a:g}", ("steer", self.label, a), a) for c, a in enumerate(self.alphas)]

    def hooks(self, model, keyed: Mapping[Hashable, Any], protocol: Protocol) -> list[FwdHook]:
        return steering_grid(model, self.layer, self.vector(model, self.run_seed(protocol)), dict(keyed), self.site)


def _read_vector(path: Path) -> np.ndarray:
    v = read_direction(path, "steer direction file")
    return v.reshape(-1) if v.ndim <= 1 else v


def _sha256(v: np.ndarray) -> str:
    """The SHA-256 of a vector's shape and float64 values (little-endian, C order)."""
    h = hashlib.sha256(repr(tuple(v.shape)).encode())
    h.update(np.ascontiguousarray(v, dtype="<f8").tobytes())
    return h.hexdigest()


def arm_hooks(model, probes: Sequence[tuple[ArmProbe, Mapping[Hashable, Any]]], protocol: Protocol) -> list[FwdHook]:
    """The ``fwd_hooks`` serving every arm of ``probes`` (each with its arms, key -> value): one call per
    family whose hooks are shared (one graft hook per site, one noise hook), one per probe otherwise."""
    shared: dict[type, tuple[ArmProbe, dict[Hashable, Any]]] = {}
    hooks: list[FwdHook] = []
    for probe, keyed in probes:
        if not keyed:
            continue
        if probe.shared_hooks:
            shared.setdefault(type(probe), (probe, {}))[1].update(keyed)
        else:
            hooks += probe.hooks(model, keyed, protocol)
    for probe, keyed in shared.values():
        hooks += probe.hooks(model, keyed, protocol)
    return hooks


@dataclass(frozen=True)
class ArmGroup:
    """A probe run's unit 0 (a :class:`~reachlens.probes.decode.Decoder`): the greedy deployment of every question and
    every candidate of every activation probe, rows with arms in one engine call per slice
    (:func:`~reachlens.runner.decode_rows`, prefix sharing on), ``max_batch_rows // (1 + arms per question)``
    questions a slice."""

    probes: tuple[tuple[int, ArmProbe], ...]
    """(position in the run, probe) of the activation probes."""

    def expected(self) -> dict[str, int]:
        return {GREEDY: 1, **{p.label: p.budget for _, p in self.probes}}

    def slices(self, task: Task, protocol: Protocol, max_batch_rows: int) -> list[tuple[int, int]]:
        return question_slices(len(task), 1 + sum(p.budget for _, p in self.probes), max_batch_rows)

    def decode(self, model, task: Task, protocol: Protocol, start: int, stop: int,
               exec_config: ExecConfig) -> list[dict[str, Any]]:
        questions = list(task.questions[start:stop])
        lengths = [len(ids) for ids in encode(model, render_prompts(task, protocol, questions,
                                                                    getattr(model, "tokenizer", None)))]
        keyed: dict[int, dict] = {pos: {} for pos, _ in self.probes}
        extra, meta = [], []
        for q, n in zip(questions, lengths):
            rows, info = [], []
            for pos, probe in self.probes:
                for c in probe.candidates(q.question_id, n, probe.run_seed(protocol)):
                    keyed[pos][c.key] = c.value
                    rows.append((None, c.key, (pos, c.candidate_idx)))
                    info.append((probe.label, c))
            extra.append(rows)
            meta.append(info)
        with model.hooks(fwd_hooks=arm_hooks(model, [(p, keyed[pos]) for pos, p in self.probes], protocol)):
            deployed, outs = decode_rows(model, task, protocol, questions, extra, exec_config)
        out = []
        for q, dep, comps, info in zip(questions, deployed, outs, meta):
            grader = question_grader(str(protocol.grader), q)
            out.append(_arm_row(grader, q, GREEDY, GREEDY, 0, dep, False))
            out += [_arm_row(grader, q, label, c.arm, c.candidate_idx, comp, True, c.detail)
                    for comp, (label, c) in zip(comps, info)]
        return out


def _arm_row(grader, q: Question, label: str, arm: str, idx: int, c, intervention: bool, detail: str = "") -> dict:
    return bank_row(candidate_row(q.question_id, idx, c, grade_completion(grader, q, c)), label, arm, intervention,
                    detail)
