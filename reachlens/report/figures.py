"""Plotly figures of a training audit. Each figure is readable on its own: titles, axis titles, units."""

from __future__ import annotations

import pandas as pd

from reachlens.studies.compare import Comparison

__all__ = ["fate_bars", "accuracy_bars", "propensity_figure", "pass_at_k_figure"]

_COLORS = {"from_reachable": "#2b8cbe", "outside": "#e6550d", "lost": "#756bb1",
           "D": "#31a354", "O_K": "#3182bd"}


def _go():
    import plotly.graph_objects as go

    return go


def fate_bars(comparisons: dict[tuple[str, str], Comparison]):
    """Per pair: questions gained from the base-reachable set, gained from outside it, and lost."""
    go = _go()
    labels = [f"{a} → {b}" for a, b in comparisons]
    s = [c.summary() for c in comparisons.values()]
    fig = go.Figure([
        go.Bar(name="gained, already base-reachable", x=labels, y=[x["gained_from_base_reachable"] for x in s],
               marker_color=_COLORS["from_reachable"], text=[x["gained_from_base_reachable"] for x in s]),
        go.Bar(name="gained, outside base-reachable set", x=labels,
               y=[x["gained_outside_base_reachable"] for x in s], marker_color=_COLORS["outside"],
               text=[x["gained_outside_base_reachable"] for x in s]),
        go.Bar(name="lost (realized before, not after)", x=labels, y=[-x["lost"] for x in s],
               marker_color=_COLORS["lost"], text=[x["lost"] for x in s]),
    ])
    n = s[0]["n"] if s else 0
    fig.update_layout(barmode="relative", title=f"Per-question fates of the realization change (n={n} questions)",
                      xaxis_title="checkpoint pair (parent → descendant)",
                      yaxis_title="questions (gained up, lost down)", legend_title="fate")
    return fig


def accuracy_bars(audits: dict[str, object]):
    """D (realized) and O_K (reachable) per checkpoint."""
    go = _go()
    names = list(audits)
    k = next(iter(audits.values())).k if audits else 0
    fig = go.Figure([
        go.Bar(name="D: deployed (greedy) accuracy", x=names, y=[audits[n].D for n in names], marker_color=_COLORS["D"],
               text=[f"{audits[n].D:.1%}" for n in names]),
        go.Bar(name=f"O_{k}: reachable with {k} samples", x=names, y=[audits[n].O_K for n in names],
               marker_color=_COLORS["O_K"], text=[f"{audits[n].O_K:.1%}" for n in names]),
    ])
    fig.update_layout(barmode="group", title=f"Realized vs reachable per checkpoint (K={k})",
                      xaxis_title="checkpoint", yaxis_title="share of questions", yaxis_tickformat=".0%",
                      yaxis_range=[0, 1])
    return fig


def propensity_figure(bins: dict[str, pd.DataFrame]):
    """Realization after training against the base model's per-question sample hit rate."""
    go = _go()
    fig = go.Figure()
    for label, df in bins.items():
        fig.add_trace(go.Scatter(x=df["bin"], y=df["rate"], mode="lines+markers+text", name=label,
                                 text=[f"n={n}" for n in df["n"]], textposition="top center"))
    fig.update_layout(title="Base-reachable, base-unrealized questions: realized after training, by base propensity",
                      xaxis_title="base propensity bin (share of the base model's K samples that are correct)",
                      yaxis_title="realized after training (share of the bin)", yaxis_tickformat=".0%",
                      yaxis_range=[0, 1.05])
    return fig


def pass_at_k_figure(audits: dict[str, object], crossovers: dict[str, list[int]] | None = None):
    """Unbiased pass@k against k per checkpoint, on a log2 axis; each pair's crossovers (``{"base / grpo":
    [64]}``, from :meth:`Comparison.crossovers`) are marked by a dotted line at the first k of the new order."""
    go = _go()
    fig = go.Figure()
    for name, r in audits.items():
        curve = r.pass_at_k_curve()
        fig.add_trace(go.Scatter(x=curve["k"], y=curve["pass_at_k"], mode="lines+markers", name=name))
    for i, (pair, ks) in enumerate((crossovers or {}).items()):
        for k in ks:
            fig.add_vline(x=k, line_dash="dot", line_color="grey", annotation_text=f"{pair} cross",
                          annotation_position="bottom right" if i % 2 else "top left")
    fig.update_layout(title="pass@k per checkpoint (unbiased estimator, mean over questions)",
                      xaxis_title="k (samples, log scale)", yaxis_title="pass@k", xaxis_type="log",
                      xaxis=dict(tickvals=[1, 2, 4, 8, 16, 32, 64, 128, 256, 512]), yaxis_tickformat=".0%")
    return fig
