"""The report of a probe run: reach by probe, the overlap of fix-sets, the selection gap, the budget-matched
comparison, recovery and the placebo, as one self-contained page (:func:`reachlens.report.page.write_page`)
and its Markdown.

Activation probes are interventions: every table names each row's ``kind``, every chart draws them in their
own colour with "[intervention]" in their name, and no chart or table pools them into an unnamed "reachable".
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd

from reachlens.escape import html_text as esc
from reachlens.escape import md_text
from reachlens.power import mde_verdict
from reachlens.report.page import html_table, write_report_files
from reachlens.report.tables import DETECTABLE, md_table
from reachlens.studies.lucky_null import N_NULL_DRAWS

__all__ = ["CAPTIONS", "matched_figure", "overlap_figure", "reach_figure", "selection_figure", "write_probe_report"]

_KIND_COLOR = {"decoding": "#3182bd", "intervention": "#e6550d"}
_TAG = " [intervention]"


def _go():
    import plotly.graph_objects as go

    return go


def _name(source: str, kind: str) -> str:
    return source + (_TAG if kind == "intervention" else "")


def _ci(v: float, lo: float, hi: float) -> str:
    if any(x is None or (isinstance(x, float) and math.isnan(x)) for x in (v, lo, hi)):
        return "undefined"
    return f"{v:.3f}\u00a0[{lo:.3f},\u00a0{hi:.3f}]"  # no break inside a rate and its interval


def _error(values, lo, hi) -> dict:
    return dict(type="data", symmetric=False, array=[h - v for v, h in zip(values, hi)],
                arrayminus=[v - x for v, x in zip(values, lo)], thickness=1.2, width=4)


def _inside(values) -> list[str]:
    """Bar labels, left blank on a bar too short to hold one (the tables give every number)."""
    return [f"{v:.0%}" if v >= 0.1 else "" for v in values]


def _wrapped(label: str) -> str:
    """A long source name broken at its keys, for a chart's axis."""
    return label if len(label) <= 32 else label.replace(":", "<br>:")


def reach_figure(reach: pd.DataFrame):
    """O per source (D for greedy) with its 95 % Wilson interval, decoding and intervention sources apart."""
    go = _go()
    fig = go.Figure()
    order = list(reach["source"])[::-1]  # the table's order, top down
    for kind, rows in reach.groupby("kind", sort=False):
        label = "decoding probe" if kind == "decoding" else "activation probe (intervention)"
        fig.add_trace(go.Bar(name=label, orientation="h", y=[_name(s, kind) for s in rows["source"]], x=rows["O"],
                             marker_color=_KIND_COLOR[kind], error_x=_error(rows["O"], rows["O_lo"], rows["O_hi"]),
                             text=_inside(rows["O"]), textposition="inside", insidetextanchor="start"))
    kinds = dict(zip(reach["source"], reach["kind"]))
    fig.update_layout(title="Reachable by probe (greedy: D; 95 % Wilson intervals)", xaxis_title="share of questions",
                      xaxis_tickformat=".0%", xaxis_range=[0, 1.05], yaxis_title=None, legend_title="kind",
                      height=160 + 26 * len(reach), yaxis_categoryorder="array",
                      yaxis_categoryarray=[_name(s, kinds[s]) for s in order], yaxis_automargin=True)
    return fig


def overlap_figure(overlap: pd.DataFrame, kinds: dict[str, str]):
    """The Jaccard index of every pair of fix-sets (questions a probe reaches that greedy misses)."""
    go = _go()
    names = list(dict.fromkeys([*overlap["a"], *overlap["b"]]))
    index = {n: i for i, n in enumerate(names)}
    z = [[math.nan for _ in names] for _ in names]
    text = [["" for _ in names] for _ in names]
    sizes = {**dict(zip(overlap["a"], overlap["fix_a"])), **dict(zip(overlap["b"], overlap["fix_b"]))}
    for n, i in index.items():
        text[i][i] = f"fix-set: {sizes[n]}"
    for r in overlap.itertuples():
        i, j = index[r.a], index[r.b]
        z[i][j] = z[j][i] = r.jaccard
        text[i][j] = text[j][i] = "undefined" if math.isnan(r.jaccard) else f"{r.jaccard:.2f}<br>({r.both} of {r.fix_a}, {r.fix_b})"
    labels = [_wrapped(_name(n, kinds.get(n, "decoding"))) for n in names]
    fig = go.Figure(go.Heatmap(z=z, x=labels, y=labels, text=text, texttemplate="%{text}", zmin=0, zmax=1,
                               colorscale="Blues", colorbar_title="Jaccard"))
    fig.update_layout(title="Overlap of fix-sets: Jaccard (shared fixes of fix-set sizes)",
                      height=300 + 90 * len(names), xaxis_tickangle=-20, yaxis_automargin=True, xaxis_automargin=True,
                      yaxis_autorange="reversed")  # the matrix reads top down in the order it reads left to right
    return fig


def selection_figure(selectors: pd.DataFrame):
    """Per probe: O, and each answer-blind selector's accuracy: the selection gap is the distance between."""
    go = _go()
    fig = go.Figure()
    names = [_name(p, k) for p, k in zip(selectors["probe"], selectors["kind"])]
    gaps = [f"{o:.0%}: gap {_signed(g, lo, hi)} ({best})" for o, g, lo, hi, best in
            zip(selectors["O"], selectors["gap"], selectors["gap_lo"], selectors["gap_hi"], selectors["best"])]
    for column, color in (("O", "#3182bd"), ("majority", "#31a354"), ("logprob", "#756bb1")):
        fig.add_trace(go.Bar(name="O (reachable)" if column == "O" else f"selector: {column}", y=names, orientation="h",
                             x=selectors[column], marker_color=color, cliponaxis=False,
                             text=gaps if column == "O" else None, textposition="outside" if column == "O" else None))
    fig.update_layout(barmode="group", title="Selection gap: reachable (O) vs what an answer-blind selector picks; "
                      "gap = O - the best selector [95 % paired bootstrap]", xaxis_title="share of questions",
                      xaxis_tickformat=".0%", xaxis_range=[0, 1.45], xaxis_tickvals=[0, 0.2, 0.4, 0.6, 0.8, 1.0],
                      height=200 + 70 * len(selectors), yaxis_autorange="reversed", yaxis_automargin=True,
                      legend_orientation="h", legend_y=-0.12 - 0.6 / (2 + len(selectors)), legend_x=0)
    return fig


def _signed(v: float, lo: float, hi: float) -> str:
    if any(x is None or (isinstance(x, float) and math.isnan(x)) for x in (v, lo, hi)):
        return "undefined"
    return f"{v:+.2f} [{lo:+.2f}, {hi:+.2f}]"


def matched_figure(matched: pd.DataFrame):
    """Each budget-matched mixture (the reference once): O and the majority vote, with bootstrap intervals."""
    go = _go()
    rows = matched.drop_duplicates("mixture")
    names = [_wrapped(_name(m, k)) for m, k in zip(rows["mixture"], rows["kind"])]
    fig = go.Figure()
    for column, label, color in (("O", "O (some candidate correct)", "#3182bd"),
                                 ("majority", "majority vote (ties averaged)", "#31a354")):
        fig.add_trace(go.Bar(name=label, orientation="h", y=names, x=rows[column], marker_color=color,
                             error_x=_error(rows[column], rows[f"{column}_lo"], rows[f"{column}_hi"]),
                             text=_inside(rows[column]), textposition="inside", insidetextanchor="start"))
    fig.update_layout(barmode="group", title=f"Budget-matched: {int(rows['budget'].iloc[0])} candidates per question "
                      "each, every subset averaged (95 % bootstrap intervals)", xaxis_title="share of questions",
                      xaxis_tickformat=".0%", xaxis_range=[0, 1.05], height=200 + 60 * len(rows),
                      yaxis_autorange="reversed", yaxis_automargin=True, legend_orientation="h", legend_x=0,
                      legend_y=-0.12 - 0.6 / (2 + len(rows)))
    return fig


CAPTIONS = {
    "reach_figure": "One bar: the share of questions a source reaches (some candidate correct; greedy: D, the "
                    "deployment), with its 95 % Wilson interval; orange: an activation probe, an intervention.",
    "selection_figure": "One bar: per probe, O (some candidate correct) or the accuracy of one answer-blind selector "
                        "on the same candidates; the label gives the selection gap, O minus the best selector.",
    "overlap_figure": "One cell: the Jaccard index of two probes' fix-sets (the questions each reaches that greedy "
                      "gets wrong), shared fixes of the two sizes below it; the diagonal gives each fix-set's size.",
    "matched_figure": "One bar: a mixture of candidates at the same budget, O or its majority vote (ties averaged), "
                      "averaged over every subset of its pools, with its 95 % bootstrap interval over questions.",
}
"""What one mark of each chart is: the caption under it."""

_LABELS = ("source", "probe", "a", "b", "mixture", "graft")
_DROP = {"budget_matched": ("probe",), "placebo": ("placebo",)}
"""Columns a reader does not need: the mixture names its probe; a placebo is its graft's spec with placebo=true."""


def _display(name: str, df: pd.DataFrame) -> pd.DataFrame:
    """A table for reading: rates with their intervals in one column, interventions named."""
    if df.empty:
        return df
    reference = (df.groupby("probe")["mixture"].transform("first") == df["mixture"]) if name == "budget_matched" else None
    d = df.drop(columns=[c for c in _DROP.get(name, ()) if c in df.columns])
    for col in [c for c in d.columns if f"{c}_mde" in d.columns]:  # a paired difference: detected, or what could be
        d.insert(d.columns.get_loc(col) + 1, f"{col}: {DETECTABLE}",
                 [mde_verdict((lo, hi), m) for lo, hi, m in zip(d[f"{col}_lo"], d[f"{col}_hi"], d[f"{col}_mde"])])
        d = d.drop(columns=[f"{col}_mde"])
    for col in [c for c in d.columns if f"{c}_lo" in d.columns]:
        d[col] = [_ci(v, lo, hi) for v, lo, hi in zip(d[col], d[f"{col}_lo"], d[f"{col}_hi"])]
        d = d.drop(columns=[f"{col}_lo", f"{col}_hi"])
    if reference is not None:  # the differences are from this row: it has none of its own
        d.loc[reference.to_numpy(), [c for c in ("dO", "dmajority", "dO_trace", "dmajority_trace") if c in d]] = "(reference)"
    if name == "recovery":  # the differences are from the first source
        d.loc[d.index[0], [c for c in ("drate", f"drate: {DETECTABLE}", "drate_trace", f"drate_trace: {DETECTABLE}")
                           if c in d]] = "(reference)"
    for col in (c for c in _LABELS if c in d.columns):
        if "kind" in d.columns and name != "overlap":
            d[col] = [_name(s, k) for s, k in zip(d[col], d["kind"])]
    return d


_NOTES = {
    "reach": "O: share of questions where a candidate of the source is correct (greedy: D, the deployment); 95 % "
             "Wilson intervals. candidates and n_tokens: per question (the compute charged).",
    "selectors": "Per probe, each answer-blind selector's accuracy (majority: ties averaged) and the selection gap "
                 "O minus the best selector, with its paired bootstrap interval.",
    "overlap": "Fix-set: the questions a probe reaches that greedy gets wrong. Jaccard = shared / either, with a "
               "bootstrap interval over questions; undefined when both fix-sets are empty.",
    "recovery": "On the stratum the sampling probe never solves (0 of K samples correct), the share each source "
                "reaches, with its Wilson interval; drate: its paired difference from the first source's (greedy) on "
                "the same questions, with its bootstrap interval and the smallest difference detectable there "
                "(80 % power, exact McNemar, two-sided 5 %).",
    "budget_matched": "Mixtures at a matched budget, averaged over every subset of their pools: O (any correct) "
                      "and majority vote (ties averaged), with bootstrap intervals; dO and dmajority are the paired "
                      "differences from the first mixture of each probe.",
    "placebo": "Each graft probe beside its placebo (the same spec with placebo=true: the same grafts at a seeded "
               "random prompt position): dO = graft - placebo with its paired bootstrap interval, and the exact "
               "McNemar p of the paired reach; drecovery: the same difference of recovery on the sampling probe's "
               "stratum. Each difference whose interval holds 0 reads 'not detected; detectable at this n: >= X': "
               "X is the smallest difference the exact McNemar test detects with 80 % power (two-sided 5 %) at "
               "this n and the measured share of questions where the two differ.",
    "reach_trace": "Reach by verified solutions (the task's trace grader, reachlens.grading.trace): a candidate counts "
                   "only when its answer is correct and every step of its worked solution is right (greedy: "
                   "D^trace); 95 % Wilson intervals. The gap to the reach table is reach through invalid solutions.",
    "weight_noise": "Per weight-noise probe and sigma (Tice et al.): each draw is one noised model, the same for every "
                    "question; best_draw and mean_draw are the draws' accuracies over the questions, phi = best_draw / "
                    "clean (the greedy D; undefined at 0), union the share any draw of that sigma answers.",
    "weight_noise_trace": "The weight-noise table by verified solutions (the task's trace grader): a draw counts a "
                          "question only when its answer is right on a valid worked solution; clean is D^trace. The "
                          "gap to the weight-noise table is what the noised models reach through invalid solutions.",
}


_TRACE_NOTE = ("On a task with a trace grader, each column c_trace beside c is c by verified solutions: a candidate "
               "counts only when its answer is right on a valid worked solution (the stratum is then the questions the "
               "sampling probe never solves, and a majority vote is over the valid candidates).")


_NULL_NOTE = ("O_null: the lucky-guess null, the share of questions the source's candidates reach when each question's "
              "candidates are scored against the gold of another question of the same kind (its gold's sign and digits), "
              f"the mean over derangements within kinds, with O_null_p95 its 95th percentile over {N_NULL_DRAWS} random "
              "derangements; O_minus_null = O - O_null with its paired bootstrap interval over questions "
              "(reachlens.studies.lucky_null).")


def _sections(tables: dict[str, pd.DataFrame]) -> tuple[list[str], list[str]]:
    body, md = [], []
    for name, df in tables.items():
        title = name.replace("_", "-").capitalize()
        note = _NOTES[name] + (" " + _TRACE_NOTE if any(c.endswith("_trace") for c in df.columns) else "")
        note += " " + _NULL_NOTE if "O_null" in df.columns else ""
        shown = _display(name, df)
        body.append(f"<h2>{esc(title)}</h2><p class=note>{esc(note)}</p>"
                    f'<div class="scroll">{html_table(shown, breaks=_LABELS)}</div>')
        md += [f"## {title}", "", note, "", md_table(shown) if len(shown) else "(none)\n"]
    return body, md


def _viewer_note(run: Any) -> str:
    """Links into ``reachlens view`` of the run: per probe family, the questions it reaches that greedy misses."""
    from reachlens.probes.bank import family_of
    from reachlens.store.view_address import VIEW_PORT, view_url
    from reachlens.store.view_address import family_column

    families = dict.fromkeys(family_of(p) for p in run.probes)
    links = ", ".join(f'<a href="{esc(view_url("0", filter=f"{family_column(f)}_reached and not realized"))}">'
                      f"{esc(f)}</a>" for f in families)
    return (f"<p class=note>Question by question, while <code>reachlens view {esc(str(run.location))}</code> runs "
            f"(127.0.0.1:{VIEW_PORT}): the questions each family reaches that greedy misses: {links}.</p>")


def write_probe_report(run: Any, out: str | Path | None = None, *, force: bool = False) -> tuple[Path, Path]:
    """Write ``report.html`` and ``report.md`` of a probe run into ``out`` (default: its directory); a report there
    that reachlens did not write is refused unless ``force``."""
    out = Path(out) if out is not None else Path(run.location)
    out.mkdir(parents=True, exist_ok=True)
    tables = run.analysis
    p, s = run.protocol, run.summary()
    kinds = dict(zip(tables["reach"]["source"], tables["reach"]["kind"]))
    figs = [reach_figure(tables["reach"]), selection_figure(tables["selectors"])]
    figs.append(overlap_figure(tables["overlap"], kinds) if len(tables["overlap"]) else None)
    figs.append(matched_figure(tables["budget_matched"]) if len(tables["budget_matched"]) else None)
    captions = [CAPTIONS[name] for name in ("reach_figure", "selection_figure", "overlap_figure", "matched_figure")]
    charts = ["" if f is None else f.to_html(full_html=False, include_plotlyjs=False, default_width="100%",
                                             default_height=f"{f.layout.height or 480}px")
              + f"<p class=note>{esc(caption)}</p>" for f, caption in zip(figs, captions)]
    head = (f"Model <code>{esc(str(run.record.model.get('spec')))}</code>, task <code>{esc(p.task)}</code>"
            f" ({s['n']} questions), greedy deployment with {p.max_new_tokens} new tokens, prompt format "
            f"<code>{esc(str(p.prompt_format))}</code>, seed {esc(str(p.seed))}, protocol <code>{p.hash}</code>. "
            f"D = {_ci(s['D'], *s['D_ci'])}.")
    warn = ("Activation probes (graft, embedding_noise, steer, weight_noise) are <b>interventions</b>, not decoding methods: "
            "they change the model's computation. They are marked [intervention] everywhere and reported apart; "
            "a union that holds one says so.")
    body, md = _sections(tables)
    page = "\n".join(["<h1>Probe run: reachable under which probe?</h1>", f"<p>{head}</p>",
                      f"<p class=note>{warn}</p>", _viewer_note(run), charts[0], body[0], charts[1], body[1], charts[2], body[2],
                      body[3], charts[3], *body[4:]])
    md_head = (f"Model {md_text(str(run.record.model.get('spec')))}, task {md_text(p.task)} ({s['n']} questions), "
               f"greedy deployment with {p.max_new_tokens} new tokens, prompt format {md_text(str(p.prompt_format))}, "
               f"seed {md_text(str(p.seed))}, protocol {p.hash}. D = {_ci(s['D'], *s['D_ci'])}.")
    md = ["# Probe run: reachable under which probe?", "", md_head, "", warn.replace("<b>", "**").replace("</b>", "**"),
          "", *md]
    return write_report_files(out, "reachlens probe run", page, "\n".join(md), figures=True, force=force,
                              status=run.record.status)
