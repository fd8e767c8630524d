"""Plotly figures of a training audit, and of a routing run. Each figure is readable on its own: titles, axis
titles, units.

Every axis is autoranged from what the figure draws, and everything drawn is a trace in data
coordinates: on a log axis plotly reads a shape's or an annotation's x in log10 units, so a marker
placed there at "k = 128" would stretch the axis to 10^128. Rates carry their 95 % Wilson intervals as
error bars; differences their paired bootstrap intervals as bands.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from reachlens.studies.compare import Comparison
from reachlens.studies.metrics import sign_changes
from reachlens.stats import wilson_interval

__all__ = ["CAPTIONS", "fate_bars", "accuracy_bars", "elicitation_figure", "propensity_figure", "pass_at_k_figure",
           "pass_at_k_delta_figure", "routing_selection_figure", "trajectory_figure"]

CAPTIONS = {
    "fate_bars": "One bar segment: the questions of one pair (parent → descendant) with one fate of the realization "
                 "change: gained from the base-reachable set or from outside it (up), or lost (down). The pair's "
                 "label gives the exact McNemar p of gained against lost.",
    "accuracy_bars": "One bar: one checkpoint's share of questions realized (D: its greedy deployment is correct) or "
                     "reachable (O_K: at least one of its K samples is correct); the whisker is the 95 % Wilson "
                     "interval.",
    "trajectory_figure": "One point: one checkpoint of the training run at its optimizer step (0: its parent), with "
                         "its 95 % interval; a line joins one quantity over the steps of the run. Below: each step's "
                         "change from step 0, its paired 95 % bootstrap interval as a band.",
    "propensity_figure": "One point: one pair's base-reachable, base-unrealized questions whose base propensity (the "
                         "share of the base model's K samples that are correct) falls in that bin, at the share of "
                         "them realized after training, labelled with that count of the bin's questions; the whisker "
                         "is the 95 % Wilson interval. Bins are categories: points are not joined.",
    "pass_at_k_figure": "One point: one checkpoint's unbiased pass@k at one k, the mean over questions; a line joins "
                        "one checkpoint's ks. An open circle marks the first k at which two curves change order.",
    "pass_at_k_delta_figure": "One point: descendant minus parent pass@k at one k (one panel per pair); the band is "
                              "its paired 95 % bootstrap interval over questions; an open circle marks a sign change.",
    "routing_selection_figure": "One bar: the share of the run's questions answered correctly by the deployment (D: "
                                "the model's own layer order, greedy), by some route of the search (O_K: the "
                                "reachable ceiling under this probe), or by the route an answer-blind selector picks "
                                "(a tie of the majority vote counts as the mean of the tied answers); the whisker on "
                                "D and O_K is the 95 % Wilson interval; each selector's label gives O_K minus it.",
    "elicitation_figure": "Training-based reach (fine-tuned copies: never pooled with inference-time probes). One "
                          "point: after fine-tuning on n correct train demonstrations, a model's mean change over "
                          "its own source on the test questions (uplift in D, left; in O_K, right), or the locked "
                          "model's uplift minus the never-locked control's; the whisker is the paired 95 % "
                          "bootstrap interval over questions.",
}
"""What one mark of each figure is, by the figure function's name: the caption a report prints under it."""

_COLORS = {"from_reachable": "#2b8cbe", "outside": "#e6550d", "lost": "#756bb1",
           "D": "#31a354", "O_K": "#3182bd"}


def _go():
    import plotly.graph_objects as go

    return go


def _p(p: float) -> str:
    return f"{p:.2g}"


def fate_bars(comparisons: dict[tuple[str, str], Comparison]):
    """Per pair: questions gained from the base-reachable set, gained from outside it, and lost; each
    pair's label carries the exact McNemar p of gained vs lost."""
    go = _go()
    s = [c.summary() for c in comparisons.values()]
    labels = [f"{a} → {b}<br>McNemar p={_p(x['mcnemar_realized_p'])}" for (a, b), x in zip(comparisons, s)]
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


def _error(values, lo, hi) -> dict:
    return dict(type="data", symmetric=False, array=[h - v for v, h in zip(values, hi)],
                arrayminus=[v - lo_ for v, lo_ in zip(values, lo)], thickness=1.2, width=4)


def accuracy_bars(audits: dict[str, object]):
    """D (realized) and O_K (reachable) per checkpoint, with 95 % Wilson intervals."""
    go = _go()
    names = list(audits)
    k = next(iter(audits.values())).k if audits else 0
    fig = go.Figure()
    for key, label in (("D", "D: deployed (greedy) accuracy"), ("O_K", f"O_{k}: reachable with {k} samples")):
        vals = [getattr(audits[n], key) for n in names]
        cis = [getattr(audits[n], f"{key}_ci") for n in names]
        fig.add_trace(go.Bar(name=label, x=names, y=vals, marker_color=_COLORS[key],
                             error_y=_error(vals, [c[0] for c in cis], [c[1] for c in cis]),
                             text=[f"{v:.1%}" for v in vals], textposition="inside", insidetextanchor="middle"))
    fig.update_layout(barmode="group", title=f"Realized vs reachable per checkpoint (K={k}; 95 % Wilson intervals)",
                      xaxis_title="checkpoint", yaxis_title="share of questions", yaxis_tickformat=".0%")
    return fig


def propensity_figure(bins: dict[str, pd.DataFrame]):
    """Realization after training against the base model's per-question sample hit rate: one point per
    (pair, bin), its rate with its 95 % Wilson interval (empty bins are left out). The bins are categories in
    their order, not a continuum: their points are not joined, and the pairs sit side by side in each bin."""
    go = _go()
    fig = go.Figure()
    order = []  # every bin some pair has, in bin order (the tables list every bin, each pair in the same order)
    for df in bins.values():
        order += [b for b in df.loc[df["n"] > 0, "bin"] if b not in order]
    rank = {b: i for df in bins.values() for i, b in enumerate(df["bin"])}
    order.sort(key=rank.__getitem__)
    top = 0.0
    for label, df in bins.items():
        df = df[df["n"] > 0]
        top = max([top, *df["rate_hi"]])
        fig.add_trace(go.Scatter(x=df["bin"], y=df["rate"], mode="markers+text", name=label, marker=dict(size=9),
                                 text=[f"{int(k)} of {int(n)}" for k, n in zip(df["realized_after"], df["n"])],
                                 textposition="middle right", cliponaxis=False,
                                 showlegend=True, error_y=_error(df["rate"], df["rate_lo"], df["rate_hi"]),
                                 customdata=df[["n", "realized_after"]].to_numpy(),
                                 hovertemplate="%{x}: %{customdata[1]} of %{customdata[0]} realized after (%{y:.0%})"))
    fig.update_layout(title="Base-reachable, base-unrealized questions: realized after training, by base propensity",
                      xaxis_title="base propensity bin (share of the base model's K samples that are correct)",
                      yaxis_title="realized after training (share of the bin)", yaxis_tickformat=".0%",
                      scattermode="group", legend_title="pair")
    fig.update_xaxes(type="category", categoryorder="array", categoryarray=order)
    pad = max(0.01, 0.05 * min(1.0, top))  # a point at 0 % or at the top drawn whole, not cut by the axis
    fig.update_yaxes(range=[-pad, min(1.0, top) + pad])
    return fig


def _log2_ticks(ks) -> dict:
    """Tick labels at the ks of the data (1, 2, 4, ...) for a log x axis."""
    ks = sorted({int(k) for k in ks})
    return dict(tickvals=ks, ticktext=[str(k) for k in ks])


def pass_at_k_figure(audits: dict[str, object], crossovers: dict[str, tuple[str, str, list[int]]] | None = None):
    """Unbiased pass@k against k per checkpoint, on a log axis.

    ``crossovers`` maps a pair label to ``(base name, trained name, ks)`` (the ks from
    :meth:`Comparison.crossovers`): each crossing is a marker on the descendant's curve at the first k of
    the new order, drawn as a trace in data coordinates.
    """
    go = _go()
    fig = go.Figure()
    all_ks = []
    for name, r in audits.items():
        curve = r.pass_at_k_curve()
        all_ks += curve["k"].tolist()
        fig.add_trace(go.Scatter(x=curve["k"], y=curve["pass_at_k"], mode="lines+markers", name=name))
    xs, ys, labels = [], [], []
    for pair, (_, trained, ks) in (crossovers or {}).items():
        curve = audits[trained].pass_at_k_curve().set_index("k")["pass_at_k"]
        for k in ks:
            xs.append(k)
            ys.append(float(curve.loc[k]))
            labels.append(f"{pair}: curves cross at k={k}")
    if xs:
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="markers", name="crossing (first k of the new order)",
                                 marker=dict(symbol="circle-open", size=16, line=dict(width=2), color="black"),
                                 hovertext=labels, hoverinfo="text"))
    fig.update_layout(title="pass@k per checkpoint (unbiased estimator, mean over questions)",
                      xaxis_title="k (samples, log scale)", yaxis_title="pass@k", xaxis_type="log",
                      xaxis=_log2_ticks(all_ks), yaxis_tickformat=".0%")
    return fig


def _rgba(hex_color: str, alpha: float) -> str:
    """``#rrggbb`` as a CSS ``rgba(...)`` colour with opacity ``alpha``."""
    r, g, b = (int(hex_color[i:i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"


_BAND_ALPHA = 0.18
"""Opacity of an interval band: its line's colour, faded."""
_LINE = ("#3182bd", "#e6550d", "#31a354", "#756bb1", "#636363")
_BAND = tuple(_rgba(c, _BAND_ALPHA) for c in _LINE)


def pass_at_k_delta_figure(curves: dict[str, pd.DataFrame]):
    """Per pair, one panel: descendant - parent pass@k against k (log axis) with its paired 95 % bootstrap
    interval as a band; crossings (sign changes of the difference) are open markers; 0 is a dotted line.

    Each pair has its own y axis, so a pair with a large difference does not flatten the others.
    """
    import math

    from plotly.subplots import make_subplots

    pairs = list(curves)
    cols = 2 if len(pairs) > 1 else 1
    rows = max(1, math.ceil(len(pairs) / cols))
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=pairs or None, vertical_spacing=0.18 if rows > 1 else 0.1,
                        horizontal_spacing=0.1)
    go = _go()
    all_ks = sorted({int(k) for df in curves.values() for k in df["k"]})
    for i, (pair, df) in enumerate(curves.items()):
        row, col = i // cols + 1, i % cols + 1
        line, band = _LINE[i % len(_LINE)], _BAND[i % len(_BAND)]
        first = i == 0  # one legend entry per kind of mark
        fig.add_trace(go.Scatter(x=df["k"], y=df["delta_hi"], mode="lines", line=dict(width=0), showlegend=False,
                                 hoverinfo="skip"), row=row, col=col)
        fig.add_trace(go.Scatter(x=df["k"], y=df["delta_lo"], mode="lines", line=dict(width=0), fill="tonexty",
                                 fillcolor=band, name="paired 95 % interval", legendgroup="band", showlegend=first,
                                 hoverinfo="skip"), row=row, col=col)
        fig.add_trace(go.Scatter(x=df["k"], y=df["delta"], mode="lines+markers", line=dict(color=line),
                                 name="difference (descendant - parent)", legendgroup="delta", showlegend=first,
                                 customdata=df[["delta_lo", "delta_hi", "p", "p_holm"]].to_numpy(),
                                 hovertemplate=f"{pair}<br>" + "k=%{x}: %{y:+.3f} [%{customdata[0]:+.3f}, "
                                               "%{customdata[1]:+.3f}], p=%{customdata[2]:.2g} (Holm %{customdata[3]:.2g})"
                                               "<extra></extra>"), row=row, col=col)
        ks = sign_changes(df["k"].tolist(), df["base"].tolist(), df["trained"].tolist())
        if ks:
            at = df.set_index("k")
            fig.add_trace(go.Scatter(x=ks, y=[float(at.loc[k, "delta"]) for k in ks], mode="markers",
                                     marker=dict(symbol="circle-open", size=14, line=dict(width=2), color="black"),
                                     name="crossing (sign change)", legendgroup="cross",
                                     showlegend=not any(t.legendgroup == "cross" for t in fig.data),
                                     hovertext=[f"{pair}: sign changes at k={k}" for k in ks], hoverinfo="text"),
                          row=row, col=col)
        ks_pair = df["k"].tolist()
        fig.add_trace(go.Scatter(x=[ks_pair[0], ks_pair[-1]], y=[0, 0], mode="lines", showlegend=False,
                                 line=dict(color="grey", dash="dot", width=1), hoverinfo="skip"), row=row, col=col)
        fig.update_xaxes(type="log", row=row, col=col, **_log2_ticks(ks_pair))
        fig.update_yaxes(tickformat="+.0%", row=row, col=col)
    for col in range(1, cols + 1):
        fig.update_xaxes(title_text="k (samples, log scale)", row=rows, col=col)
    fig.update_yaxes(title_text="pass@k difference", col=1)
    fig.update_layout(title="pass@k difference (descendant - parent) with its paired 95 % bootstrap interval",
                      height=max(480, 330 * rows), legend=dict(orientation="h", y=-0.12 if rows == 1 else -0.08))
    return fig


def trajectory_figure(trajectory: pd.DataFrame, k: int):
    """Realization and reachability over training, one run's checkpoints by optimizer step
    (:meth:`TrainingAudit.trajectory`). Top: D, pass@1, pass@8 and O_K at each step, each with its 95 %
    interval (Wilson for D and O_K, question bootstrap for pass@k). Bottom: the change of D, O_K and pass@1
    from step 0 with its paired 95 % bootstrap interval as a band, so a drift smaller than the levels'
    intervals (the same questions on both sides) can be read against zero; the hover gives its p and Holm p."""
    from plotly.subplots import make_subplots

    go = _go()
    t = trajectory
    steps = [int(s) for s in t["step"]]
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.1, row_heights=[0.58, 0.42],
                        subplot_titles=("level at each step", "change from step 0 (paired 95 % interval)"))
    series = [("O_K", f"O_{k}: reachable with {k} samples", _COLORS["O_K"], "solid"),
              ("pass@8", "pass@8 (T of the protocol)", "#9ecae1", "dash"),
              ("D", "D: deployed (greedy)", _COLORS["D"], "solid"),
              ("pass@1", "pass@1 (T of the protocol)", "#e6550d", "dash")]
    for col, label, color, dash in series:
        if col not in t.columns:
            continue
        hover = [f"{m} (step {s})<br>{label}: {v:.3f} [{lo:.3f}, {hi:.3f}]"
                 for m, s, v, lo, hi in zip(t["model"], t["step"], t[col], t[f"{col}_lo"], t[f"{col}_hi"])]
        fig.add_trace(go.Scatter(x=t["step"], y=t[col], mode="lines+markers", name=label, legendgroup=col,
                                 line=dict(color=color, dash=dash), marker=dict(color=color),
                                 error_y=_error(t[col], t[f"{col}_lo"], t[f"{col}_hi"]),
                                 hovertext=hover, hoverinfo="text"), row=1, col=1)
    for col, label, color, dash in series:
        key = f"delta_{col}"
        if key not in t.columns:
            continue
        lo, hi = t[f"{key}_lo"].fillna(0.0), t[f"{key}_hi"].fillna(0.0)  # step 0: a change of 0, no interval
        fig.add_trace(go.Scatter(x=t["step"], y=hi, mode="lines", line=dict(width=0), showlegend=False,
                                 legendgroup=col, hoverinfo="skip"), row=2, col=1)
        fig.add_trace(go.Scatter(x=t["step"], y=lo, mode="lines", line=dict(width=0), fill="tonexty",
                                 fillcolor=_rgba(color, _BAND_ALPHA), showlegend=False, legendgroup=col, hoverinfo="skip"),
                      row=2, col=1)
        hover = [f"{m} (step {s})<br>change of {label.split(':')[0]} from step 0: {d:+.3f}"
                 + ("" if i == 0 else f" [{a:+.3f}, {b:+.3f}], p {_p(p)} (Holm {_p(ph)})")
                 for i, (m, s, d, a, b, p, ph) in enumerate(zip(t["model"], t["step"], t[key], lo, hi, t[f"{key}_p"],
                                                                t[f"{key}_p_holm"]))]
        fig.add_trace(go.Scatter(x=t["step"], y=t[key], mode="lines+markers", name=label, legendgroup=col,
                                 showlegend=False, line=dict(color=color, dash=dash),
                                 marker=dict(color=color), hovertext=hover, hoverinfo="text"), row=2, col=1)
    fig.add_trace(go.Scatter(x=[steps[0], steps[-1]], y=[0, 0], mode="lines", showlegend=False,
                             line=dict(color="grey", dash="dot", width=1), hoverinfo="skip"), row=2, col=1)
    fig.update_layout(title=f"Realization and reachability over training ({t['model'].iloc[0]} at step {steps[0]} "
                            f"to {t['model'].iloc[-1]} at step {steps[-1]}; 95 % intervals)", height=720)
    fig.update_xaxes(tickvals=steps, ticktext=[str(s) for s in steps])
    fig.update_xaxes(title_text="optimizer step of the training run (0: its parent)", row=2, col=1)
    fig.update_yaxes(title_text="share of questions", tickformat=".0%", row=1, col=1)
    fig.update_yaxes(title_text="change from step 0", tickformat="+.0%", row=2, col=1)
    return fig


def routing_selection_figure(summary: dict, selectors: Sequence[str], k: int):
    """A routing run's D, O_K and each answer-blind selector's accuracy (``summary``: the run's summary, which holds
    each of ``selectors`` by name; ``k``: its budget of route evaluations), as horizontal bars: the selection gap is
    each selector's distance from O_K."""
    go = _go()
    n = int(summary["n"])
    selectors = [name for name in selectors if name in summary]
    fig = go.Figure()
    for key, what, color in (("D", "deployed (native route, greedy)", _COLORS["D"]),
                             ("O_K", f"a correct route among {k}", _COLORS["O_K"])):
        v = float(summary[key])
        lo, hi = wilson_interval(round(v * n), n)
        label = f"{'D' if key == 'D' else f'O_{k}'} {v:.1%} [{float(lo):.1%}, {float(hi):.1%}]: {what}"
        fig.add_trace(go.Bar(name=label, y=[label], x=[v], orientation="h", marker_color=color, cliponaxis=False,
                             error_x=_error([v], [float(lo)], [float(hi)])))
    o_k = float(summary["O_K"])
    values = [float(summary[s]) for s in selectors]
    fig.add_trace(go.Bar(name="selector (answer-blind)", y=[f"selector: {s}" for s in selectors], x=values,
                         orientation="h", marker_color="#756bb1", cliponaxis=False, textposition="outside",
                         text=[f"{v:.1%}, gap {o_k - v:+.1%}" for v in values]))
    fig.update_layout(title=f"Reachable under {k} routes vs what an answer-blind selector picks (n={n})",
                      xaxis_title="share of questions", xaxis_tickformat=".0%", xaxis_range=[0, 1.3],
                      xaxis_tickvals=[0, 0.2, 0.4, 0.6, 0.8, 1.0], yaxis_autorange="reversed", yaxis_automargin=True,
                      height=220 + 45 * (2 + len(selectors)), showlegend=False)
    return fig


def elicitation_figure(uplift: pd.DataFrame, difference: pd.DataFrame):
    """An elicitation run's uplift over the source in D and O_K per number of demonstrations, for the model and
    the control, and their difference, each with its paired 95 % interval (the run's ``uplift`` and ``difference``
    tables)."""
    from plotly.subplots import make_subplots

    go = _go()
    fig = make_subplots(rows=1, cols=2, subplot_titles=("uplift in D (greedy)", "uplift in O_K"))
    series = [(side, uplift[uplift["side"] == side], color) for side, color in
              (("model", _COLORS["outside"]), ("control", _COLORS["lost"]))]
    for col, metric in enumerate(("D", "O_K"), start=1):
        for side, rows, color in series:
            v, lo, hi = (rows[f"delta_{metric}{s}"].tolist() for s in ("", "_lo", "_hi"))
            fig.add_trace(go.Scatter(x=[str(n) for n in rows["n_demos"]], y=v, name=f"{side}: tuned minus source",
                                     mode="lines+markers", marker_color=color, error_y=_error(v, lo, hi),
                                     legendgroup=side, showlegend=col == 1), row=1, col=col)
        d = difference[difference["metric"] == metric]
        v, lo, hi = d["difference"].tolist(), d["difference_lo"].tolist(), d["difference_hi"].tolist()
        fig.add_trace(go.Scatter(x=[str(n) for n in d["n_demos"]], y=v, name="model uplift minus control uplift",
                                 mode="lines+markers", line_dash="dash", marker_color="#333333",
                                 error_y=_error(v, lo, hi), legendgroup="difference", showlegend=col == 1),
                      row=1, col=col)
    fig.update_xaxes(title_text="demonstrations fine-tuned on (n)", type="category")
    fig.update_yaxes(title_text="change in share of questions", tickformat="+.0%", zeroline=True)
    fig.update_layout(title="Training-based reach: what a few demonstrations unlock, beside a never-locked control",
                      height=480, legend_orientation="h", legend_y=-0.25)
    return fig
