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

import dataclasses
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from jaxtyping import Float
from torch import Tensor

from reachlens.engine import LayerStack, tokenize_prompts, tokenizer_of
from reachlens.engine.scoring import right_padded
from reachlens.errors import ReachlensError, UnknownNameError
from reachlens.execution import ExecConfig
from reachlens.interventions import (
    MLP_OUTPUT_SITE,
    UNIT_SITE,
    check_layer,
    hook_name,
    mlp_out_weight,
    sites_of,
    steering_site,
    top_units,
    unit_contributions,
)
from reachlens.runner import Executor
from reachlens.studies.causal_job import SweepJob, run_sweep
from reachlens.studies.causal_runs import (
    CausalResult,
    Condition,
    ConditionSpec,
    SilenceSweep,
    SteerSweep,
    UnitsSweep,
    evaluate_conditions,
    evaluate_hooks,
    flip_rate,
    outcome,
)
from reachlens.studies.recognition import EvalSets
from reachlens.tasks.base import Task
from reachlens.tasks.chat import render_prompts

__all__ = [
    "CausalResult", "Condition", "Direction", "SilenceSweep", "SteerSweep", "UnitsSweep", "answer_activations",
    "best_alpha", "best_layer", "default_alphas", "evaluate_conditions", "evaluate_hooks", "flip_rate",
    "mean_difference_direction", "outcome", "silence_sweep", "steer_sweep", "unit_ranking",
    "units_sweep",
]


@dataclass(frozen=True)
class Running:
    """Where and how a sweep runs (the keyword arguments every sweep takes): its run directory (resumable), who
    decodes, a progress callback, or each condition alone in this process (``one_at_a_time``)."""

    out: str | Path | None = None
    exec_config: ExecConfig | None = None
    """Device and dtype, and who decodes (``workers``, ``ray``); its batch rows are the sets' (``sets.config``)."""
    progress: Callable[[int, int], None] | None = None
    executor: Executor | None = None
    one_at_a_time: bool = False


def _run(kind: str, model, task: Task, sets: EvalSets, conditions: list[ConditionSpec],
         table: Callable[[list[pd.DataFrame]], pd.DataFrame], meta: dict[str, Any], how: Running,
         extra: dict[str, pd.DataFrame] | None = None) -> CausalResult:
    """The sweep ``kind`` of ``conditions`` on the runner (:func:`~reachlens.studies.causal_job.run_sweep`)."""
    ex = dataclasses.replace(how.exec_config or ExecConfig(), max_batch_rows=sets.config.max_batch_rows)
    job = SweepJob(kind, model, task, sets, tuple(conditions), table, meta, dict(extra or {}), how.out, ex)
    return run_sweep(job, one_at_a_time=how.one_at_a_time, progress=how.progress, executor=how.executor)



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
    out: str | Path | None = None, exec_config: ExecConfig | None = None,
    progress: Callable[[int, int], None] | None = None, executor: Executor | None = None,
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

    ``out`` is its run directory (slices written as they finish, a re-run resumes it), ``exec_config`` says who
    decodes (``workers``, ``ray``: each worker loads the model's source), ``progress`` is called with (questions
    done, questions in all); the same for every sweep. ``one_at_a_time`` decodes each condition alone, here.

    >>> sweep = silence_sweep(model, task, sets)  # doctest: +SKIP
    >>> best_layer(sweep.table)  # doctest: +SKIP
    """
    _check_sets(model, sets, allow_other_model)
    layers = list(range(len(model.blocks))) if layers is None else [check_layer(model, int(x)) for x in layers]
    sites = {c: "+".join(sites_of(c)) for c in components}  # a bad name raises before anything runs
    cells = [(L, c) for L in layers for c in components]
    conditions = [ConditionSpec("none")] + [ConditionSpec(f"zero L{layer} {comp}", "zero", (layer, comp))
                                            for layer, comp in cells]
    if control_seed is not None:
        conditions += [ConditionSpec(f"control L{layer} {comp}", "displace", (layer, comp), {"seed": control_seed})
                       for layer, comp in cells]

    def table(outcomes: list[pd.DataFrame]) -> pd.DataFrame:
        per_q = dict(zip((c.name for c in conditions), outcomes))
        rows = [{"condition": "none", "layer": -1, "component": "none", "sites": "", **outcome(per_q["none"]),
                 "flip": 0.0}]
        for layer, comp in cells:
            zero = per_q[f"zero L{layer} {comp}"]
            row = {"condition": f"zero L{layer} {comp}", "layer": layer, "component": comp, "sites": sites[comp],
                   **outcome(zero), "flip": flip_rate(zero, per_q["none"])}
            if control_seed is not None:
                ctrl = per_q[f"control L{layer} {comp}"]
                row.update({f"control_{k}": v for k, v in outcome(ctrl).items() if not k.startswith("n_")},
                           control_flip=flip_rate(ctrl, per_q["none"]))
            rows.append(row)
        return pd.DataFrame(rows)

    meta = {"kind": "silence", "layers": layers, "components": list(components), "sites": sites, "sets": sets.counts,
            "model": sets.model, "rule": sets.rule.describe(), "control_seed": control_seed}
    return _run("silence", model, task, sets, conditions, table, meta,
                Running(out, exec_config, progress, executor, one_at_a_time))


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
    out: str | Path | None = None, exec_config: ExecConfig | None = None,
    progress: Callable[[int, int], None] | None = None, executor: Executor | None = None,
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
    conditions = [ConditionSpec(f"{label} {sign}{alpha:g}", "steer", (layer, vec, -alpha if sign == "-" else alpha,
                                                                      site))
                  for label, vec, alpha in grid for sign in "-+"]

    def table(per_q: list[pd.DataFrame]) -> pd.DataFrame:
        rows = []
        for i, (label, _, alpha) in enumerate(grid):
            m, p = outcome(per_q[2 * i]), outcome(per_q[2 * i + 1])
            rows.append({"vector": label, "alpha": alpha, "alpha_rel": alpha / direction.norm,
                         "rescue": m["repair"], "rescue_break": m["break"], "induction": p["break"],
                         "induction_repair": p["repair"], "n_rescued": m["n_repaired"], "n_induced": p["n_broken"],
                         "n_failure": m["n_failure"], "n_healthy": m["n_healthy"]})
        return pd.DataFrame(rows)

    meta = {"kind": "steer", "layer": layer, "site": site, "hook": name, "direction_source": direction.source,
            "direction_norm": direction.norm, "control_seed": control_seed, "sets": sets.counts, "model": sets.model,
            "positions": "every position, prompt and generated"}
    return _run("steer", model, task, sets, conditions, table, meta,
                Running(out, exec_config, progress, executor, one_at_a_time))


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
    out: str | Path | None = None, exec_config: ExecConfig | None = None,
    progress: Callable[[int, int], None] | None = None, executor: Executor | None = None,
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
        ConditionSpec(f"zero L{layer} mlp", "zero", (layer, "mlp_out"), which="failure")]
    for k in ks:
        conditions.append(ConditionSpec(f"top{int(k)}", "units", (layer, ranking["unit"].tolist()[: int(k)])))
        if control_seed is not None:
            rand = sorted(random.Random(f"units/{control_seed}/{layer}/{int(k)}").sample(range(d_mlp), int(k)))
            conditions.append(ConditionSpec(f"random{int(k)}", "units", (layer, rand)))

    def table(per_q: list[pd.DataFrame]) -> pd.DataFrame:
        outcomes = {c.name: outcome(pq) for c, pq in zip(conditions, per_q)}
        block = outcomes[f"zero L{layer} mlp"]["repair"] if block_repair is None else block_repair
        rows = []
        for k in ks:
            o = outcomes[f"top{int(k)}"]
            row = {"k": int(k), "repair": o["repair"], "break": o["break"], "n_repaired": o["n_repaired"],
                   "block_repair": block, "recovery": o["repair"] / block if block else math.nan}
            if control_seed is not None:
                ro = outcomes[f"random{int(k)}"]
                row.update(random_repair=ro["repair"], random_break=ro["break"],
                           random_recovery=ro["repair"] / block if block else math.nan)
            rows.append(row)
        return pd.DataFrame(rows)

    meta = {"kind": "units", "layer": layer, "ks": [int(k) for k in ks], "d_mlp": d_mlp, "control_seed": control_seed,
            "top_units": ranking["unit"].tolist()[: max(int(k) for k in ks)], "sets": sets.counts, "model": sets.model,
            "ranking": "contribution_i = (mean_failure(post_i) - mean_healthy(post_i)) * (W_out[:, i] . v)"}
    return _run("units", model, task, sets, conditions, table, meta,
                Running(out, exec_config, progress, executor, one_at_a_time), {"ranking": ranking})
