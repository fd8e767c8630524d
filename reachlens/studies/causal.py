"""Causal tests of a recognition-vs-generation failure: silence a block, steer along its direction,
silence its top units.

Every measurement runs greedy generation of the failure set and the healthy panel
(:class:`~reachlens.studies.recognition.EvalSets`) with interventions attached as hooks
(:mod:`reachlens.interventions`). A sweep's conditions decode together, each an *arm* of one batch
(:func:`evaluate_conditions`, through :func:`~reachlens.runner.deploy_arms_and_grade`): every
condition's hooks act on its own rows only, and each question's prompt is prefilled once per arm.
``one_at_a_time=True`` decodes each condition alone, its hooks on every row; the tables are the same
(tested). Per condition:

* **repair rate**: share of the failure set (recognized, generated wrong) now generated correctly;
* **break rate**: share of the healthy panel (right both ways) now generated wrong;
* **flip rate**: share of both sets whose answer changed at all; each rate with a 95 % Wilson interval.

:func:`silence_sweep` zero-ablates the MLP, the attention, or both (``layer``) of each block and
measures each beside its *control*, the same site moved as far along a random direction (the null: with two
options a perturbation that only scrambles answers repairs half a failure set). It includes an unhooked ``none``
row, which should read repair 0 and break 0: greedy decoding is deterministic, so a non-zero baseline would flag a numerical near-tie (a different batch composition
can move a logit in its last bits). :func:`best_layer` picks the block whose MLP ablation
repairs most net of breaks.

:func:`steer_sweep` adds ``-alpha v`` (rescue, measured on the failure set) and ``+alpha v``
(induction, measured on the healthy panel) to a block's output at every position, over an alpha
grid. The default ``v`` (:func:`mean_difference_direction`) is the unit vector along mean(block
output | failure) - mean(block output | healthy) at the answer position, the last prompt token
(where the first answer token is predicted); alphas are in the units of the residual stream, and
:func:`default_alphas` spaces them as multiples of the raw difference's norm.

:func:`units_sweep` ranks the MLP's hidden units by their share of that difference along ``v``
(:func:`~reachlens.interventions.units.unit_contributions`), silences the top ``k`` and reports
the fraction of the whole-MLP repair they recover, beside ``k`` units drawn at random as a control.

Caveat: repair and break rates are counts over small sets; with 20 failures one question is 5
points. The tables carry the counts (``n_repaired``, ``n_broken``) beside the rates.

One module (about 490 lines): the three sweeps share their measurement (evaluate_conditions, outcome),
their directions and their run class; each sweep alone is short.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, ClassVar

import pandas as pd
import torch
from jaxtyping import Float
from torch import Tensor

from reachlens.engine import LayerStack, tokenize_prompts, tokenizer_of
from reachlens.errors import ReachlensError, UnknownNameError
from reachlens.interventions import (
    MLP_OUTPUT_SITE,
    UNIT_SITE,
    FwdHook,
    check_layer,
    hook_name,
    mlp_out_weight,
    random_displacement,
    sites_of,
    steering,
    steering_site,
    top_units,
    unit_ablation,
    unit_contributions,
    zero_ablation,
)
from reachlens.engine.scoring import right_padded
from reachlens.execution import ExecConfig, model_exec
from reachlens.models import identity_of
from reachlens.records import CAUSAL_COLUMNS
from reachlens.stats import wilson_interval
from reachlens.store import Run, RunDir, RunRecord, register_kind
from reachlens.runner import deploy_arms_and_grade
from reachlens.studies.recognition import EvalSets, generate_and_grade, generation_protocol
from reachlens.tasks.base import Task
from reachlens.tasks.chat import render_prompts

__all__ = [
    "CausalResult", "Condition", "Direction", "SilenceSweep", "SteerSweep", "UnitsSweep", "answer_activations",
    "best_alpha", "best_layer", "default_alphas", "evaluate_conditions", "evaluate_hooks", "flip_rate",
    "mean_difference_direction", "outcome", "silence_sweep", "steer_sweep", "unit_ranking",
    "units_sweep",
]



@dataclass(frozen=True)
class CausalResult(Run):
    """A sweep's table (one row per condition), its per-question outcomes, and what made it: a run of kind
    ``silence``, ``steer`` or ``units`` (one subclass each). Its options (the record's) are the sweep's
    settings, ``meta``; its tables are ``KIND`` (the conditions), ``KIND_per_question`` and, for a units sweep,
    ``units_ranking``."""

    kind: ClassVar[str]
    record_fields: ClassVar[dict[str, tuple[type, ...]]] = {"options.sets": (dict, type(None))}
    extra_tables: ClassVar[tuple[str, ...]] = ()
    """Names of the further tables a sweep of this kind has (``ranking`` for units)."""

    table: pd.DataFrame = field(repr=False)
    per_question: pd.DataFrame = field(repr=False)
    extra: dict[str, pd.DataFrame] = field(default_factory=dict, repr=False)
    """Further tables by name (the unit ranking of a units sweep). Its record (always given): the greedy protocol
    of the sets, the sweep's options (``meta``), model, data."""

    @property
    def meta(self) -> dict[str, Any]:
        """The sweep's settings (its record's options)."""
        return self.record.options

    def summary(self) -> dict[str, Any]:
        """How many conditions were measured, on how many failure and healthy questions."""
        sets = self.meta.get("sets", {})
        return {"kind": self.kind, "n_conditions": len(self.table), "n_failure": sets.get("n_failure"),
                "n_healthy": sets.get("n_healthy"), "model": self.record.model.get("spec")}

    def tables(self) -> dict[str, pd.DataFrame]:
        return {self.kind: self.table, f"{self.kind}_per_question": self.per_question,
                **{f"{self.kind}_{name}": df for name, df in self.extra.items()}}

    def report_tables(self) -> dict[str, pd.DataFrame]:
        return {self.kind: self.table, **{f"{self.kind}_{name}": df for name, df in self.extra.items()}}

    @classmethod
    def read(cls, run: RunDir) -> CausalResult:
        return cls(run.read_table(cls.kind), run.read_table(f"{cls.kind}_per_question"),
                   {name: run.read_table(f"{cls.kind}_{name}") for name in cls.extra_tables}, record=run.record(),
                   location=run.path)


@register_kind
class SilenceSweep(CausalResult):
    """:func:`silence_sweep`'s run."""

    kind = "silence"


@register_kind
class SteerSweep(CausalResult):
    """:func:`steer_sweep`'s run."""

    kind = "steer"


@register_kind
class UnitsSweep(CausalResult):
    """:func:`units_sweep`'s run."""

    kind = "units"
    extra_tables = ("ranking",)


_SWEEPS = {cls.kind: cls for cls in (SilenceSweep, SteerSweep, UnitsSweep)}


def _result(kind: str, model, task: Task, sets: EvalSets, table: pd.DataFrame, per_q: pd.DataFrame,
            meta: dict[str, Any], extra: dict[str, pd.DataFrame] | None = None) -> CausalResult:
    record = RunRecord.new(kind, sets.protocol, identity_of(model), task.data_identity, options=meta,
                           exec=model_exec(model))
    return _SWEEPS[kind](table, per_q, dict(extra or {}), record=record)


# --- measurements --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Condition:
    """One condition of a sweep: its name in the tables, its intervention, and the questions it runs."""

    name: str
    hooks: Callable[..., list[FwdHook]] | None = None
    """The intervention's hook factory, called as ``hooks(arm=ARM)`` (the ``arm=`` of the factories in
    :mod:`reachlens.interventions`: None acts on every row, a key only on that arm's rows); None: the
    plain model."""
    which: str = "both"
    """``both``, ``failure`` or ``healthy``: the sets it runs on."""


def _ids(sets: EvalSets, which: str) -> list[str]:
    if which not in ("both", "failure", "healthy"):
        raise ReachlensError(f"which={which!r} must be 'both', 'failure' or 'healthy'")
    return (list(sets.failure) if which != "healthy" else []) + (list(sets.healthy) if which != "failure" else [])


def _labelled(gen: pd.DataFrame, sets: EvalSets, condition: str) -> pd.DataFrame:
    """A deployment table as a condition's ``CAUSAL_COLUMNS`` (its set and condition added)."""
    if gen.empty:
        return pd.DataFrame(columns=CAUSAL_COLUMNS)
    failure = set(sets.failure)
    gen["set"] = ["failure" if q in failure else "healthy" for q in gen["question_id"]]
    gen["condition"] = condition
    return gen[CAUSAL_COLUMNS]


def evaluate_hooks(
    model, task: Task, sets: EvalSets, hooks: Sequence[FwdHook] = (), condition: str = "none",
    *, which: str = "both",
) -> pd.DataFrame:
    """Greedy generation of the failure set and/or healthy panel with ``hooks`` live; ``CAUSAL_COLUMNS``."""
    ids = _ids(sets, which)
    if not ids:
        return pd.DataFrame(columns=CAUSAL_COLUMNS)
    with model.hooks(fwd_hooks=list(hooks)):
        gen = generate_and_grade(model, task, sets.protocol, ids, max_batch_rows=sets.config.max_batch_rows)
    return _labelled(gen, sets, condition)


def evaluate_conditions(
    model, task: Task, sets: EvalSets, conditions: Sequence[Condition], *, one_at_a_time: bool = False,
) -> list[pd.DataFrame]:
    """Per condition, the greedy generation of its questions under its intervention (``CAUSAL_COLUMNS``).

    Every condition is an arm of one decode (:func:`~reachlens.runner.deploy_arms_and_grade`): the
    per-arm hooks of all conditions are attached at once and each question's rows of every arm decode
    side by side, its prompt prefilled once per arm. ``one_at_a_time`` decodes each condition alone
    instead, its hooks acting on every row (:func:`evaluate_hooks`): the same tables, one decode each.
    """
    if one_at_a_time:
        return [evaluate_hooks(model, task, sets, c.hooks(arm=None) if c.hooks else (), c.name, which=c.which)
                for c in conditions]
    arms = [None if c.hooks is None else (c.name, i) for i, c in enumerate(conditions)]
    hooks = [h for c, arm in zip(conditions, arms) if c.hooks is not None for h in c.hooks(arm=arm)]
    plan = [(arm, _ids(sets, c.which)) for c, arm in zip(conditions, arms)]
    if not any(ids for _, ids in plan):
        return [pd.DataFrame(columns=CAUSAL_COLUMNS) for _ in conditions]
    with model.hooks(fwd_hooks=hooks):
        gens = deploy_arms_and_grade(model, task, generation_protocol(task, sets.protocol), plan,
                                     ExecConfig(max_batch_rows=sets.config.max_batch_rows))
    return [_labelled(gen, sets, c.name) for gen, c in zip(gens, conditions)]


def outcome(per_question: pd.DataFrame) -> dict[str, Any]:
    """Repair and break rates (with counts and 95 % Wilson intervals) of one condition's per-question outcomes."""
    fail = per_question[per_question["set"] == "failure"]
    healthy = per_question[per_question["set"] == "healthy"]
    n_rep, n_brk = int(fail["realized"].sum()), int((~healthy["realized"].astype(bool)).sum())
    rep_lo, rep_hi = wilson_interval(n_rep, len(fail))
    brk_lo, brk_hi = wilson_interval(n_brk, len(healthy))
    return {
        "repair": n_rep / len(fail) if len(fail) else math.nan, "break": n_brk / len(healthy) if len(healthy) else math.nan,
        "n_repaired": n_rep, "n_failure": len(fail), "n_broken": n_brk, "n_healthy": len(healthy),
        "repair_lo": rep_lo, "repair_hi": rep_hi, "break_lo": brk_lo, "break_hi": brk_hi,
    }


def flip_rate(per_question: pd.DataFrame, reference: pd.DataFrame) -> float:
    """The share of questions whose deployed answer under a condition differs from ``reference``'s (the unhooked
    model's): how often the intervention merely changes the answer, right or wrong. NaN without common questions."""
    ref = dict(zip(reference["question_id"], reference["deployed_answer"].astype(str)))
    pairs = [(a, ref[q]) for q, a in zip(per_question["question_id"], per_question["deployed_answer"].astype(str))
             if q in ref]
    return sum(a != b for a, b in pairs) / len(pairs) if pairs else math.nan


def _check_sets(model, sets: EvalSets, allow_other_model: bool) -> None:
    if not allow_other_model:
        sets.check_model(model)
    if not sets.failure:
        raise ReachlensError("the failure set is empty: nothing to repair")


# --- zero-ablation sweep -------------------------------------------------------------------------
def silence_sweep(
    model, task: Task, sets: EvalSets, *, layers: Sequence[int] | None = None,
    components: Sequence[str] = ("mlp", "attn", "layer"), allow_other_model: bool = False,
    one_at_a_time: bool = False, control_seed: int | None = 0,
) -> CausalResult:
    """Zero-ablate each ``component`` of each layer; repair and break rates per (layer, component), each with its
    null beside it.

    A component is ``mlp`` (site ``mlp_out``), ``attn`` (``attn_out``), ``layer`` (both: the block's
    whole contribution), any other site (``mlp_post``, ``resid_pre``, ...) or sites joined by ``+``
    (:func:`~reachlens.engine.sites.sites_of`); the table's ``component`` column keeps the name given
    and its ``sites`` column the sites it zeroed.

    The null (``control_seed`` not None): the same site moved as far as zeroing moves it, along a random direction
    (:func:`~reachlens.interventions.random_displacement`), a perturbation that carries no information. With two
    options, scrambling answers alone repairs about half a failure set: a repair rate means something only against
    its control's (``control_repair``, ``control_break``), and ``flip`` / ``control_flip`` say how often each merely
    changes the answer (against the unhooked ``none`` row), over both sets. Rates carry 95 % Wilson intervals.

    >>> sweep = silence_sweep(model, task, sets)  # doctest: +SKIP
    >>> best_layer(sweep.table)  # doctest: +SKIP
    """
    _check_sets(model, sets, allow_other_model)
    layers = list(range(len(model.blocks))) if layers is None else [check_layer(model, int(x)) for x in layers]
    sites = {c: "+".join(sites_of(c)) for c in components}  # a bad name raises before anything runs
    cells = [(L, c) for L in layers for c in components]
    conditions = [Condition("none")] + [
        Condition(f"zero L{layer} {comp}", partial(zero_ablation, model, layer, comp)) for layer, comp in cells]
    if control_seed is not None:
        conditions += [Condition(f"control L{layer} {comp}", partial(random_displacement, model, layer, comp,
                                                                      seed=control_seed)) for layer, comp in cells]
    per_q = dict(zip((c.name for c in conditions),
                     evaluate_conditions(model, task, sets, conditions, one_at_a_time=one_at_a_time)))
    rows = [{"condition": "none", "layer": -1, "component": "none", "sites": "", **outcome(per_q["none"]), "flip": 0.0}]
    for layer, comp in cells:
        zero = per_q[f"zero L{layer} {comp}"]
        row = {"condition": f"zero L{layer} {comp}", "layer": layer, "component": comp, "sites": sites[comp],
               **outcome(zero), "flip": flip_rate(zero, per_q["none"])}
        if control_seed is not None:
            ctrl = per_q[f"control L{layer} {comp}"]
            row.update({f"control_{k}": v for k, v in outcome(ctrl).items() if not k.startswith("n_")},
                       control_flip=flip_rate(ctrl, per_q["none"]))
        rows.append(row)
    meta = {"kind": "silence", "layers": layers, "components": list(components), "sites": sites, "sets": sets.counts,
            "model": sets.model, "rule": sets.rule.describe(), "control_seed": control_seed}
    return _result("silence", model, task, sets, pd.DataFrame(rows), pd.concat(per_q.values(), ignore_index=True), meta)


def best_layer(table: pd.DataFrame, component: str = "mlp") -> int:
    """The layer whose ``component`` ablation has the largest repair minus break (ties: the lowest layer)."""
    t = table[(table["component"] == component) & (table["layer"] >= 0)]
    if t.empty:
        raise ReachlensError(f"the sweep has no rows for component {component!r}")
    net = t["repair"] - t["break"].fillna(0.0)
    best = max(zip(net, t["layer"]), key=lambda x: (x[0], -x[1]))
    return int(best[1])


# --- directions ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Direction:
    """A steering direction for one hook: a unit vector and where it came from."""

    vector: Tensor = field(repr=False)
    """Unit-norm ``[d]`` vector."""
    norm: float
    """Norm of the raw vector before normalization (the mean difference's size for the default)."""
    hook_name: str
    source: str
    """``mean_difference`` or ``user``."""

    @classmethod
    def from_vector(cls, vector: Tensor, hook_name: str, source: str = "user") -> Direction:
        v = vector.detach().float().flatten()
        n = float(v.norm())
        if not math.isfinite(n) or n == 0.0:
            raise ReachlensError(f"a direction needs a finite, non-zero vector (norm {n!r})")
        return cls(v / n, n, hook_name, source)


@torch.inference_mode()
def answer_activations(
    model, prompts: Sequence[str], hook_name: str, *, batch_size: int = 32
) -> Float[Tensor, "n d"]:
    """The activation at ``hook_name`` at each prompt's last token (the answer position), unhooked otherwise.
    A chat prompt's last token is its template's last one (the generation prompt's end, e.g. Qwen2.5's newline
    after ``<|im_start|>assistant``): the position whose output is the answer's first token.

    Prompts are batched right-padded, so the last real token never sees padding.
    """
    if hook_name not in model.hook_dict:
        raise UnknownNameError(f"model has no hook point {hook_name!r}")
    tok = tokenizer_of(model)
    ids = tokenize_prompts(tok, prompts)
    stack = LayerStack(model)
    pad = tok.pad_token_id or 0
    out: list[Tensor] = []
    for start in range(0, len(ids), batch_size):
        chunk = ids[start : start + batch_size]
        seen: list[Tensor] = []

        def grab(x: Tensor, *, hook) -> None:
            seen.append(x.detach())

        with model.hooks(fwd_hooks=[(hook_name, grab)]):
            stack.forward(right_padded(chunk, int(pad)).to(stack.device))
        if len(seen) != 1:
            raise RuntimeError(f"hook {hook_name!r} fired {len(seen)} times in one forward; expected once")
        last = torch.tensor([len(s) - 1 for s in chunk], device=seen[0].device)
        out.append(seen[0][torch.arange(len(chunk), device=last.device), last].float().cpu())
    return torch.cat(out).reshape(len(ids), -1)


def _prompts(model, task: Task, sets: EvalSets, ids: Sequence[str]) -> list[str]:
    """The deployment's prompts of questions ``ids``, rendered as the sets' generation rendered them (under a chat
    format: by the model's chat template, checked against the sets' template hash)."""
    by_id = {q.question_id: q for q in task.questions}
    return render_prompts(task, sets.protocol.resolved(task), [by_id[i] for i in ids], getattr(model, "tokenizer", None))


def mean_difference_direction(model, task: Task, sets: EvalSets, layer: int, site: str = "mlp_out") -> Direction:
    """Unit vector along mean(activation | failure) - mean(activation | healthy) at ``site`` of block
    ``layer`` (:func:`~reachlens.engine.sites.hook_name`), at the answer position."""
    if not sets.failure or not sets.healthy:
        raise ReachlensError("a mean-difference direction needs a non-empty failure set and healthy panel; "
                         "pass a direction vector instead")
    name = hook_name(model, layer, site)
    fail = answer_activations(model, _prompts(model, task, sets, sets.failure), name)
    healthy = answer_activations(model, _prompts(model, task, sets, sets.healthy), name)
    return Direction.from_vector(fail.mean(0) - healthy.mean(0), name, "mean_difference")


def default_alphas(direction: Direction, multiples: Sequence[float] = (0.0, 0.5, 1.0, 2.0, 4.0, 8.0)) -> list[float]:
    """Alphas as multiples of the direction's raw norm (for a user vector of norm 1: the multiples)."""
    return [m * direction.norm for m in multiples]


# --- steering sweep ------------------------------------------------------------------------------
def steer_sweep(
    model, task: Task, sets: EvalSets, layer: int, *, alphas: Sequence[float] | None = None,
    direction: Direction | Tensor | None = None, site: str = "mlp_out", control_seed: int | None = None,
    allow_other_model: bool = False, one_at_a_time: bool = False,
) -> CausalResult:
    """Rescue (``-alpha v`` on the failure set) and induction (``+alpha v`` on the healthy panel) per alpha,
    ``v`` added at ``site`` of block ``layer`` (:func:`~reachlens.interventions.steering.steering`:
    ``mlp_out``, ``attn_out``, ``resid_post`` for the block's whole output, ...).

    Each alpha runs both sets under ``-alpha v`` and under ``+alpha v``; the table also carries the
    side effects (``rescue_break``: healthy broken by the rescue; ``induction_repair``). With
    ``control_seed``, a random unit vector (seeded) is run at the same alphas as a control.
    """
    _check_sets(model, sets, allow_other_model)
    name, _ = steering_site(model, layer, site)
    if direction is None:
        direction = mean_difference_direction(model, task, sets, layer, site)
    elif isinstance(direction, Tensor):
        direction = Direction.from_vector(direction, name)
    alphas = default_alphas(direction) if alphas is None else [float(a) for a in alphas]
    if any(a < 0 or not math.isfinite(a) for a in alphas):
        raise ReachlensError(f"alphas {alphas!r} must be finite and >= 0 (the sign is the rescue/induction side)")
    vectors = [("direction", direction.vector)]
    if control_seed is not None:
        g = torch.Generator().manual_seed(control_seed)
        r = torch.randn(direction.vector.shape[0], generator=g)
        vectors.append(("random", r / r.norm()))
    grid = [(label, vec, alpha) for label, vec in vectors for alpha in alphas]
    conditions = [Condition(f"{label} {sign}{alpha:g}",
                            partial(steering, model, layer, vec, -alpha if sign == "-" else alpha, site))
                  for label, vec, alpha in grid for sign in "-+"]
    per_q = evaluate_conditions(model, task, sets, conditions, one_at_a_time=one_at_a_time)
    rows = []
    for i, (label, _, alpha) in enumerate(grid):
        m, p = outcome(per_q[2 * i]), outcome(per_q[2 * i + 1])
        rows.append({"vector": label, "alpha": alpha, "alpha_rel": alpha / direction.norm,
                     "rescue": m["repair"], "rescue_break": m["break"], "induction": p["break"],
                     "induction_repair": p["repair"], "n_rescued": m["n_repaired"], "n_induced": p["n_broken"],
                     "n_failure": m["n_failure"], "n_healthy": m["n_healthy"]})
    meta = {"kind": "steer", "layer": layer, "site": site, "hook": name, "direction_source": direction.source,
            "direction_norm": direction.norm, "control_seed": control_seed, "sets": sets.counts, "model": sets.model,
            "positions": "every position, prompt and generated"}
    return _result("steer", model, task, sets, pd.DataFrame(rows), pd.concat(per_q, ignore_index=True), meta)


def best_alpha(table: pd.DataFrame) -> float:
    """The alpha of the ``direction`` rows with the largest rescue minus rescue_break (ties: smallest alpha)."""
    t = table[table["vector"] == "direction"]
    net = t["rescue"] - t["rescue_break"].fillna(0.0)
    return float(max(zip(net, t["alpha"]), key=lambda x: (x[0], -x[1]))[1])


# --- top-k units ---------------------------------------------------------------------------------
def unit_ranking(model, task: Task, sets: EvalSets, layer: int, direction: Direction | Tensor | None = None) -> pd.DataFrame:
    """The MLP's hidden units ranked by their share of the failure-minus-healthy output along ``v``.

    The output is the MLP's own (site ``mlp.hook_out``, linear in the units at ``mlp_post``; for most
    families the same hook as ``mlp_out``, before the post-MLP norm of Gemma and OLMo 2), and the
    default ``v`` is the mean difference there. Columns: ``rank, unit, contribution, delta_post, w_dot_v``;
    ``contribution`` sums over units to the mean output difference projected on ``v``.
    """
    if not sets.failure or not sets.healthy:
        raise ReachlensError("ranking units needs a non-empty failure set and healthy panel")
    mlp_name = hook_name(model, layer, MLP_OUTPUT_SITE)
    if direction is None:
        direction = mean_difference_direction(model, task, sets, layer, MLP_OUTPUT_SITE)
    elif isinstance(direction, Tensor):
        direction = Direction.from_vector(direction, mlp_name)
    post = hook_name(model, layer, UNIT_SITE)
    delta = (answer_activations(model, _prompts(model, task, sets, sets.failure), post).mean(0)
             - answer_activations(model, _prompts(model, task, sets, sets.healthy), post).mean(0))
    w = mlp_out_weight(model, layer).float().cpu()
    contrib = unit_contributions(delta, w, direction.vector)
    order = top_units(contrib, contrib.shape[0])
    wv = direction.vector @ w
    return pd.DataFrame({"rank": range(len(order)), "unit": order, "contribution": contrib[order].tolist(),
                         "delta_post": delta[order].tolist(), "w_dot_v": wv[order].tolist()})


def units_sweep(
    model, task: Task, sets: EvalSets, layer: int, *, ks: Sequence[int] = (32,),
    direction: Direction | Tensor | None = None, block_repair: float | None = None, control_seed: int | None = 0,
    allow_other_model: bool = False, one_at_a_time: bool = False,
) -> CausalResult:
    """Silence the top ``k`` units (per ``k``) and report repair, break and the recovered share of the
    whole-MLP repair (``recovery = repair_k / repair_block``); ``random_*`` columns silence ``k``
    units drawn with ``control_seed`` (None: no control)."""
    _check_sets(model, sets, allow_other_model)
    ranking = unit_ranking(model, task, sets, layer, direction)
    d_mlp = len(ranking)
    for k in ks:
        if not 1 <= int(k) <= d_mlp:
            raise ReachlensError(f"k={k!r} must lie in 1..{d_mlp} (block {layer}'s hidden units)")
    conditions = [] if block_repair is not None else [
        Condition(f"zero L{layer} mlp", partial(zero_ablation, model, layer, "mlp_out"), which="failure")]
    for k in ks:
        top = ranking["unit"].tolist()[: int(k)]
        conditions.append(Condition(f"top{int(k)}", partial(unit_ablation, model, layer, top)))
        if control_seed is not None:
            rand = sorted(random.Random(f"units/{control_seed}/{layer}/{int(k)}").sample(range(d_mlp), int(k)))
            conditions.append(Condition(f"random{int(k)}", partial(unit_ablation, model, layer, rand)))
    per_q = evaluate_conditions(model, task, sets, conditions, one_at_a_time=one_at_a_time)
    outcomes = {c.name: outcome(pq) for c, pq in zip(conditions, per_q)}
    if block_repair is None:
        block_repair = outcomes[f"zero L{layer} mlp"]["repair"]
    rows = []
    for k in ks:
        o = outcomes[f"top{int(k)}"]
        row = {"k": int(k), "repair": o["repair"], "break": o["break"], "n_repaired": o["n_repaired"],
               "block_repair": block_repair, "recovery": o["repair"] / block_repair if block_repair else math.nan}
        if control_seed is not None:
            ro = outcomes[f"random{int(k)}"]
            row.update(random_repair=ro["repair"], random_break=ro["break"],
                       random_recovery=ro["repair"] / block_repair if block_repair else math.nan)
        rows.append(row)
    meta = {"kind": "units", "layer": layer, "ks": [int(k) for k in ks], "d_mlp": d_mlp, "control_seed": control_seed,
            "top_units": ranking["unit"].tolist()[: max(int(k) for k in ks)], "sets": sets.counts, "model": sets.model,
            "ranking": "contribution_i = (mean_failure(post_i) - mean_healthy(post_i)) * (W_out[:, i] . v)"}
    return _result("units", model, task, sets, pd.DataFrame(rows), pd.concat(per_q, ignore_index=True), meta,
                   {"ranking": ranking})
