"""Reports: one self-contained HTML file (plotly.js inlined, no CDN) and Markdown, for any run.

:func:`write_report` renders a training audit (or any study view of audits: one audit, a
comparison); :func:`write_run_report` renders any other run directory (a routing run, a recognition
run, a causal sweep) from its run record, summary and tables.

The training-audit report, its Markdown and ``reachlens demo``'s printout show the same tables
(:func:`display_tables`): every delta with its paired 95 % bootstrap interval and its p-value,
Holm-adjusted where a study tests several pairs or ks at once, and each note says which family the
adjustment corrects over.
"""

from __future__ import annotations

import html
import json
import math
from pathlib import Path

import pandas as pd

from reachlens.records import markdown_table
from reachlens.report.figures import (
    accuracy_bars,
    fate_bars,
    pass_at_k_delta_figure,
    pass_at_k_figure,
    propensity_figure,
    trajectory_figure,
)
from reachlens.store import RunDir
from reachlens.studies.stats import N_BOOT, N_PERM
from reachlens.studies.training_audit import TrainingAudit

__all__ = ["display_tables", "markdown_summary", "text_summary", "write_report", "write_run_report"]


def _fmt(x) -> str:
    if isinstance(x, (bool,)):
        return "yes" if x else "no"
    if isinstance(x, float):
        return "undefined" if math.isnan(x) else f"{x:.3f}"
    return str(x)


def _ci(v: float, lo: float, hi: float, signed: bool = True) -> str:
    if any(math.isnan(x) for x in (v, lo, hi)):
        return "undefined"
    f = "+.3f" if signed else ".3f"
    return f"{v:{f}} [{lo:{f}}, {hi:{f}}]"


def _p(p: float) -> str:
    return "undefined" if math.isnan(p) else f"{p:.2g}"


def _pct(x: float) -> str:
    return "undefined" if math.isnan(x) else f"{x:.1%}"


def _heading(title: str) -> str:
    """A table title as a heading: capitalized, except a leading name such as ``pass@k``."""
    return title if title.startswith("pass@k") else title[0].upper() + title[1:]


def _md_table(df: pd.DataFrame) -> str:
    return markdown_table(df) + "\n"


def _html_table(df: pd.DataFrame) -> str:
    if df.empty:
        return "<p><em>(none)</em></p>"
    return pd.DataFrame({c: [_fmt(v) for v in df[c]] for c in df.columns}).to_html(
        index=False, classes="tbl", border=0)


CROSSOVER_NOTE = (
    "crossover_k: the budgets k at which trained - base pass@k changes sign (each the first k of the new "
    "sign); a trained model ahead at small k that the base overtakes at larger k reaches fewer questions "
    "than the base from that budget on. outside_noise: those crossovers whose new order holds beyond the paired "
    "95% bootstrap interval over questions of the difference at that k (the pass@k differences table has every k)."
)

FORMAT_CONTROL_NOTE = (
    "D_trained_shared is the descendant under the parent's prompt, D_trained_native under its own; "
    "gain_retained = (D_trained_shared - D_base) / (D_trained_native - D_base), the share of the native "
    "realization gain that survives the shared prompt (negative: the descendant does worse than its parent "
    "under the shared prompt; undefined: no native gain). D_base_in_native is the parent under the "
    "descendant's native prompt, where it was audited so: for a parent trained in that format itself the "
    "like-for-like gain is D_trained_native - D_base_in_native."
)


TRAJECTORY_NOTE = (
    "One training run's checkpoints by optimizer step, its parent at step 0, all under the study's protocol. "
    "D and O_K: 95% Wilson intervals; pass@k: unbiased estimator, mean over questions, 95% question-bootstrap "
    "interval. Each later step against step 0: paired 95% bootstrap interval over questions, exact McNemar p "
    "(D: gained vs lost; O_K: entered vs left), sign-flip p for pass@1; Holm: adjusted over the run's later "
    "steps, one family per quantity."
)


def _headline(study: TrainingAudit) -> tuple[pd.DataFrame, pd.DataFrame]:
    h = study.headline()
    if h.empty:
        return h, h
    realized = pd.DataFrame({
        "pair": h["pair"], "D_base": h["D_base"], "D_trained": h["D_trained"],
        "delta_D [95% CI]": [_ci(*r) for r in h[["delta_D", "delta_D_lo", "delta_D_hi"]].itertuples(index=False)],
        "gained": h["gained"], "lost": h["lost"], "McNemar p": h["p_realized"].map(_p),
        "Holm p": h["p_realized_holm"].map(_p), "gained from base-reachable": h["gained_from_base_reachable"],
    })
    bounds = study.unreachability().set_index("pair")["bound_max"]
    reachable = pd.DataFrame({
        "pair": h["pair"], "O_K_base": h["O_K_base"], "O_K_trained": h["O_K_trained"],
        "delta_O_K [95% CI]": [_ci(*r) for r in h[["delta_O_K", "delta_O_K_lo", "delta_O_K_hi"]].itertuples(index=False)],
        "entered": h["entered"], "left": h["left"], "McNemar p": h["p_reachable"].map(_p),
        "Holm p": h["p_reachable_holm"].map(_p),
        "left: per-sample rate below": [("-" if math.isnan(b) else f"{b:.4f}") for b in bounds.reindex(h["pair"])],
    })
    return realized, reachable


def _checkpoints(study: TrainingAudit) -> pd.DataFrame:
    c = study.checkpoints()
    if c.empty:
        return c
    return pd.DataFrame({
        "model": c["model"], "n": c["n"],
        "D [95% Wilson]": [_ci(*r, signed=False) for r in c[["D", "D_lo", "D_hi"]].itertuples(index=False)],
        "O_K [95% Wilson]": [_ci(*r, signed=False) for r in c[["O_K", "O_K_lo", "O_K_hi"]].itertuples(index=False)],
        "samples cut at max_new_tokens": c["truncated_samples"].map(_pct),
        "deployed cut at max_new_tokens": c["truncated_deployed"].map(_pct),
    })


def _pass_at_k_deltas(study: TrainingAudit) -> pd.DataFrame:
    d = study.pass_at_k_deltas()
    if d.empty:
        return d
    return pd.DataFrame({
        "pair": d["pair"], "k": d["k"], "base": d["base"], "trained": d["trained"],
        "delta [95% CI]": [_ci(*r) for r in d[["delta", "delta_lo", "delta_hi"]].itertuples(index=False)],
        "sign-flip p": d["p"].map(_p), "Holm p (over the pair's ks)": d["p_holm"].map(_p),
    })


def _trajectory(study: TrainingAudit) -> pd.DataFrame:
    t = study.trajectory()
    if t.empty:
        return t
    k = study.protocol.k

    def delta(key: str) -> list[str]:
        return [("-" if math.isnan(r[f"{key}_p"]) else
                 f"{_ci(r[key], r[f'{key}_lo'], r[f'{key}_hi'])}, p {_p(r[f'{key}_p'])} (Holm {_p(r[f'{key}_p_holm'])})")
                for _, r in t.iterrows()]

    out = {"step": t["step"], "model": t["model"],
           "D [95% Wilson]": [_ci(*r, signed=False) for r in t[["D", "D_lo", "D_hi"]].itertuples(index=False)],
           f"O_{k} [95% Wilson]": [_ci(*r, signed=False) for r in t[["O_K", "O_K_lo", "O_K_hi"]].itertuples(index=False)]}
    for col in [c for c in t.columns if c.startswith("pass@") and c[5:].isdigit()]:
        out[f"{col} [95% CI]"] = [_ci(*r, signed=False) for r in t[[col, f"{col}_lo", f"{col}_hi"]].itertuples(index=False)]
    out["delta_D vs step 0"] = delta("delta_D")
    out[f"delta_O_{k} vs step 0"] = delta("delta_O_K")
    out["delta_pass@1 vs step 0"] = delta("delta_pass@1")
    return pd.DataFrame(out)


def _temperature(study: TrainingAudit) -> pd.DataFrame:
    t = study.temperature_control()
    if t.empty:
        return t
    return pd.DataFrame({
        "pair": t["pair"], "temperature": t["temperature"].map(lambda x: f"{x:g}"), "source": t["source"],
        "left questions re-probed": t["n_reprobed"], "reachable again": t["n_reachable"],
        "share [95% Wilson]": [_ci(*r, signed=False) for r in t[["share", "share_lo", "share_hi"]].itertuples(index=False)],
    })


def _truncation(study: TrainingAudit) -> pd.DataFrame:
    t = study.truncation_control()
    if t.empty:
        return t
    return pd.DataFrame({
        "pair": t["pair"], "max_new_tokens": t["max_new_tokens"],
        "samples cut (base -> trained)": [f"{_pct(a)} -> {_pct(b)}" for a, b in zip(t["samples_base"], t["samples_trained"])],
        "samples gap (points)": (100 * t["samples_gap"]).map(lambda x: f"{x:+.1f}"),
        "deployed cut (base -> trained)": [f"{_pct(a)} -> {_pct(b)}" for a, b in zip(t["deployed_base"], t["deployed_trained"])],
        "deployed gap (points)": (100 * t["deployed_gap"]).map(lambda x: f"{x:+.1f}"),
        "flagged": t["flagged"].map(lambda f: "FLAGGED" if f else "no"),
    })


def _length(study: TrainingAudit) -> pd.DataFrame:
    t = study.length_control()
    if t.empty:
        return t
    return pd.DataFrame({
        "pair": t["pair"], "max_new_tokens": t["max_new_tokens"],
        "samples cut (base -> trained)": [f"{_pct(a)} -> {_pct(b)}" for a, b in
                                          zip(t["truncated_samples_base"], t["truncated_samples_trained"])],
        "delta_D [95% CI]": [_ci(*r) for r in t[["delta_D", "delta_D_lo", "delta_D_hi"]].itertuples(index=False)],
        "McNemar p (D)": t["mcnemar_realized_p"].map(_p),
        "delta_O_K [95% CI]": [_ci(*r) for r in t[["delta_O_K", "delta_O_K_lo", "delta_O_K_hi"]].itertuples(index=False)],
        "McNemar p (O_K)": t["mcnemar_reachable_p"].map(_p),
    })


def _as_text(df: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame({c: [_fmt(v) for v in df[c]] for c in df.columns}) if len(df) else df


def display_tables(study: TrainingAudit) -> list[tuple[str, pd.DataFrame, str]]:
    """``(title, table, note)`` for every table of the report, formatted for reading (strings)."""
    return [(title, _as_text(df), note) for title, df, note in _tables(study)]


def _tables(study: TrainingAudit) -> list[tuple[str, pd.DataFrame, str]]:
    plan = study.plan
    n_pairs = len(study.comparisons())
    realized, reachable = _headline(study)
    temps = ", ".join(f"{t:g}" for t in plan.control_temperatures)
    length_note = (
        f"A pair is flagged when its shares of outputs cut at max_new_tokens differ by more than "
        f"{100 * plan.truncation_margin:g} points (samples or deployed); "
        + (f"flagged pairs are audited again at max_new_tokens={plan.length_max_new_tokens} (length control)."
           if plan.length_max_new_tokens else "this study runs no length control (`reachlens control length` does).")
    )
    length = _length(study)
    if length.empty and plan.length_max_new_tokens:
        length_note_2 = "No pair was flagged, so nothing was rerun at a longer decode."
    else:
        length_note_2 = ("Each flagged pair at the audits' length, then at the longer one: if the deltas hold, "
                         "truncation does not explain them.")
    return [
        ("headline: realized (D, greedy deployment)", realized,
         f"delta_D: paired bootstrap 95% interval over questions ({N_BOOT} resamples, seed 0). McNemar p: exact "
         f"two-sided test of gained vs lost. Holm p: adjusted over {study.holm_family}." if n_pairs else ""),
        (f"headline: reachable (O_K, K={study.protocol.k} samples)", reachable,
         "delta_O_K: paired bootstrap 95% interval. McNemar p: exact test of entered vs left, Holm-adjusted as above. "
         "left: the questions that left the reachable set have 0 correct of K samples after training; each one's "
         "per-sample success rate lies below 1 - 0.05^(1/K) (one-sided 95%, about 3/K); the column gives the "
         "largest such bound of the pair (the unreachability bounds table has their distribution)." if n_pairs else ""),
        ("checkpoints", _checkpoints(study), "D and O_K with 95% Wilson score intervals."),
        *([("trajectory: realization and reachability over training", _trajectory(study), TRAJECTORY_NOTE)]
          if plan.trajectory else []),
        ("pass@k crossovers", study.pass_at_k_crossovers(), CROSSOVER_NOTE),
        ("pass@k differences", _pass_at_k_deltas(study),
         f"delta: mean over questions of the per-question difference of unbiased pass@k, with its paired bootstrap "
         f"95% interval ({N_BOOT} resamples); sign-flip p: two-sided permutation test of that mean "
         f"(exact up to {N_PERM.bit_length() - 1} non-zero differences, else {N_PERM} random sign flips, so the smallest "
         f"p it reports is {1 / (N_PERM + 1):.1g}); Holm p: adjusted over the ks of the pair."),
        ("budget control", study.budget_control(), "O_K and O_2K from the same seed stream."),
        ("prompt-format control", study.format_control(), FORMAT_CONTROL_NOTE),
        ("temperature control", _temperature(study),
         f"The questions that left the reachable set (base-reachable, trained-unreachable at T="
         f"{study.protocol.temperature:g}) re-probed with the descendant at T = {temps}, same K, same seed stream. "
         "A share near 0 at every temperature: the answer is gone, not merely cooled out of reach."
         if plan.control_temperatures else "This study runs no temperature control (`reachlens control temperature` does)."),
        ("unreachability bounds", study.unreachability(),
         "Per pair, the questions that left the reachable set and the distribution of their one-sided 95% upper "
         "bounds on the descendant's per-sample success rate (0 of n graded samples correct: 1 - 0.05^(1/n))."),
        ("truncation parity", _truncation(study), length_note),
        ("length control", length, length_note_2),
    ]


def text_summary(study: TrainingAudit) -> str:
    """Every table of the report as plain text (what ``reachlens demo`` prints)."""
    parts = []
    for title, df, note in display_tables(study):
        parts.append(f"{title}:\n" + (df.to_string(index=False) if len(df) else "(none)") + (f"\n{note}" if note else ""))
    return "\n\n".join(parts)


def markdown_summary(study: TrainingAudit) -> str:
    p = study.protocol
    parts = [
        "# Training audit", "",
        f"Task `{p.task}` ({p.split}), K={p.k} samples at T={p.temperature}, top-p {p.top_p}, "
        f"{p.max_new_tokens} new tokens, prompt format `{p.prompt_format}`, grader `{p.grader}`, seed {p.seed} "
        f"(protocol {p.hash}).", "",
    ]
    for title, df, note in display_tables(study):
        parts += [f"## {_heading(title)}", "", _md_table(df)] + ([note, ""] if note else [])
    parts += ["## Propensity bins (base-reachable, base-unrealized questions)", "",
              "rate: realized after training, with its 95% Wilson interval.", ""]
    for (a, b), c in study.comparisons().items():
        parts += [f"### {a} -> {b}", "", _md_table(_bins(c.propensity_bins()))]
    return "\n".join(parts)


def _bins(df: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame({"bin": df["bin"], "n": df["n"], "realized_after": df["realized_after"],
                         "rate [95% Wilson]": [_ci(*r, signed=False) for r in
                                               df[["rate", "rate_lo", "rate_hi"]].itertuples(index=False)]})


def write_report(study: TrainingAudit, out: str | Path) -> tuple[Path, Path]:
    """Write ``report.html`` and ``report.md`` into ``out``; return their paths."""
    from plotly.offline import get_plotlyjs

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    comps = study.comparisons()
    figs = []
    if comps:
        figs.append(("Per-question fates", fate_bars(comps)))
    if study.audits:
        figs.append(("Realized vs reachable", accuracy_bars(study.audits)))
    trajectory = study.trajectory()
    if len(trajectory) > 1:
        figs.append(("Realization and reachability over training", trajectory_figure(trajectory, study.protocol.k)))
    if comps:
        figs.append(("Propensity bins", propensity_figure({f"{a} → {b}": c.propensity_bins() for (a, b), c in comps.items()})))
    if study.audits:
        crossovers = {f"{a} / {b}": (a, b, c.crossovers()) for (a, b), c in comps.items()}
        drawn = study.plan.paired_models  # a trajectory-only checkpoint has the trajectory figure
        figs.append(("pass@k curves", pass_at_k_figure(
            {**{n: r for n, r in study.audits.items() if n in drawn},
             **{f"{n} (K={e.k})": e for n, e in study.extended.items()}}, crossovers)))
    if comps:
        figs.append(("pass@k difference with its interval", pass_at_k_delta_figure(
            {f"{a} → {b}": c.pass_at_k_curve() for (a, b), c in comps.items()})))
    charts = []
    for title, fig in figs:
        charts.append(f"<h2>{html.escape(title)}</h2>")
        charts.append(fig.to_html(full_html=False, include_plotlyjs=False, default_width="100%",
                                  default_height=f"{fig.layout.height or 480}px"))
    sections = [f"<h2>{html.escape(_heading(title))}</h2>{_html_table(df)}"
                + (f"<p class=note>{html.escape(note)}</p>" if note else "")
                for title, df, note in display_tables(study)]
    p = study.protocol
    page = f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>reachlens training audit</title>
<script type="text/javascript">{get_plotlyjs()}</script>
<style>body{{font-family:sans-serif;max-width:1200px;margin:2em auto;padding:0 1em}}
.tbl{{border-collapse:collapse;font-size:13px;margin:0.5em 0}}
.tbl td,.tbl th{{padding:3px 9px;text-align:right;border-bottom:1px solid #ddd}}
.tbl th{{background:#f4f4f4}} .note{{font-size:13px;color:#444;max-width:1100px}}</style>
</head><body>
<h1>Training audit: realized vs reachable</h1>
<p>Task <code>{html.escape(p.task)}</code> ({html.escape(p.split)}), K={p.k} at T={p.temperature}, top-p {p.top_p},
{p.max_new_tokens} new tokens, prompt format <code>{html.escape(str(p.prompt_format))}</code>,
grader <code>{html.escape(str(p.grader))}</code>, seed {p.seed}, protocol <code>{p.hash}</code>.</p>
{''.join(sections[:3])}
{''.join(charts)}
{''.join(sections[3:])}
<h2>Propensity bins</h2><p class=note>Base-reachable, base-unrealized questions; rate: realized after training,
with its 95% Wilson interval.</p>
{''.join(f"<h3>{html.escape(a)} → {html.escape(b)}</h3>" + _html_table(_bins(c.propensity_bins())) for (a, b), c in comps.items())}
</body></html>
"""
    html_path, md_path = out / "report.html", out / "report.md"
    html_path.write_text(page)
    md_path.write_text(markdown_summary(study))
    return html_path, md_path


# --- any other run -------------------------------------------------------------------------------------
_MAIN_TABLES = {"routing": "questions", "recognition": "questions"}
_TEXT_COLUMNS = ("text", "deployed_text")


def _run_tables(run: RunDir, kind: str) -> list[tuple[str, pd.DataFrame]]:
    """The tables a report of this kind shows: the per-question table (raw text left out), or a
    causal sweep's table."""
    if kind in _MAIN_TABLES:
        q = run.read_table(_MAIN_TABLES[kind])
        return [("Per question", q.drop(columns=[c for c in _TEXT_COLUMNS if c in q.columns]))]
    tables = []
    for name in (kind, f"{kind}_ranking"):
        path = run.path / f"{name}.csv"
        if path.is_file():
            tables.append((name, pd.read_csv(path)))
    return tables


def _kv_table(df: pd.DataFrame) -> str:
    """A two-column (name, value) table, left-aligned."""
    return df.to_html(index=False, header=False, classes="kv", border=0)


def write_run_report(path: str | Path, out: str | Path | None = None) -> tuple[Path, Path]:
    """Write ``report.html`` and ``report.md`` for the run directory ``path`` (into ``out``, default
    ``path``): its run record, its summary and its main table.

    >>> write_run_report("runs/route")  # doctest: +SKIP
    """
    run = RunDir(path)
    record = run.record()
    summary = run.summary() if run.has_summary() else {}
    out = Path(out) if out is not None else run.path
    out.mkdir(parents=True, exist_ok=True)
    header = [("kind", record.kind), ("model", record.model.get("spec", "-")),
              ("fingerprint", record.model.get("fingerprint", "-"))]
    if record.protocol is not None:
        header += [(k, str(v)) for k, v in record.protocol.to_dict().items()] + [("protocol hash", record.protocol.hash)]
    header += [(f"options.{k}", json.dumps(v, default=str) if isinstance(v, (dict, list)) else str(v))
               for k, v in record.options.items()]
    header += [("reachlens", str(record.reachlens_version)), ("command", " ".join(record.command or ()) or "-")]
    head_df = pd.DataFrame(header, columns=["field", "value"])
    # summary.json holds no NaN: a number the run could not define is null, shown as "undefined"
    flat = {k: ("undefined" if v is None else f"{v:.3f}" if isinstance(v, float) and math.isfinite(v) else
                "undefined" if isinstance(v, float) else str(v))
            for k, v in summary.items() if not isinstance(v, (dict, list))}
    summary_df = pd.DataFrame({"metric": list(flat), "value": list(flat.values())})
    tables = _run_tables(run, record.kind)
    title = f"reachlens {record.kind} run"
    md = [f"# {title}", "", "## Run", "", _md_table(head_df), "## Summary", "", _md_table(summary_df)]
    body = [f"<h1>{html.escape(title)}</h1>", "<h2>Run</h2>", _kv_table(head_df),
            "<h2>Summary</h2>", _kv_table(summary_df)]
    for name, df in tables:
        md += [f"## {name}", "", _md_table(df)]
        body += [f"<h2>{html.escape(name)}</h2>", f'<div class="scroll">{_html_table(df)}</div>']
    page = f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:sans-serif;max-width:1100px;margin:2em auto;}} .tbl td,.tbl th{{padding:4px 10px;text-align:right}}
.kv td{{padding:2px 10px;text-align:left;vertical-align:top}} .kv td:first-child{{font-weight:bold}} .scroll{{overflow-x:auto}}</style>
</head><body>
{''.join(body)}
</body></html>
"""
    html_path, md_path = out / "report.html", out / "report.md"
    html_path.write_text(page)
    md_path.write_text("\n".join(md))
    return html_path, md_path
