"""Reports: one self-contained HTML file (plotly.js inlined, no CDN) and Markdown, for any run.

:func:`write_report` renders a training audit (or any study view of audits: one audit, a
comparison); :func:`write_run_report` renders any other run directory (a routing run, a recognition
run, a causal sweep) from its run record, summary and tables.
"""

from __future__ import annotations

import html
import json
import math
from pathlib import Path

import pandas as pd

from reachlens.records import markdown_table
from reachlens.report.figures import accuracy_bars, fate_bars, pass_at_k_figure, propensity_figure
from reachlens.store import RunDir
from reachlens.studies.training_audit import TrainingAudit

__all__ = ["write_report", "write_run_report", "markdown_summary"]


def _md_table(df: pd.DataFrame) -> str:
    return markdown_table(df) + "\n"


def _html_table(df: pd.DataFrame) -> str:
    if df.empty:
        return "<p><em>(none)</em></p>"
    return df.to_html(index=False, float_format=lambda x: "undefined" if math.isnan(x) else f"{x:.3f}",
                      classes="tbl", border=0)


CROSSOVER_NOTE = (
    "crossover_k: the budgets k at which trained - base pass@k changes sign (each the first k of the new "
    "sign); a trained model ahead at small k that the base overtakes at larger k reaches fewer questions "
    "than the base from that budget on. outside_noise: those crossovers whose new order holds beyond the paired "
    "95% bootstrap interval over questions of the difference at that k (Comparison.pass_at_k_curve has every k)."
)

FORMAT_CONTROL_NOTE = (
    "D_trained_shared is the descendant under the parent's prompt, D_trained_native under its own; "
    "gain_retained = (D_trained_shared - D_base) / (D_trained_native - D_base), the share of the native "
    "realization gain that survives the shared prompt (negative: the descendant does worse than its parent "
    "under the shared prompt; undefined: no native gain). D_base_in_native is the parent under the "
    "descendant's native prompt, where it was audited so: for a parent trained in that format itself the "
    "like-for-like gain is D_trained_native - D_base_in_native."
)


def markdown_summary(study: TrainingAudit) -> str:
    p = study.protocol
    parts = [
        "# Training audit", "",
        f"Task `{p.task}` ({p.split}), K={p.k} samples at T={p.temperature}, top-p {p.top_p}, "
        f"{p.max_new_tokens} new tokens, prompt format `{p.prompt_format}`, grader `{p.grader}`, seed {p.seed} "
        f"(protocol {p.hash}).", "",
        "## Headline: per pair", "", _md_table(study.headline()),
        "## pass@k crossovers", "", _md_table(study.pass_at_k_crossovers()), CROSSOVER_NOTE, "",
        "## Budget control (same seed stream)", "", _md_table(study.budget_control()),
        "## Prompt-format control", "", _md_table(study.format_control()), FORMAT_CONTROL_NOTE, "",
        "## Propensity bins (base-reachable, base-unrealized questions)", "",
    ]
    for (a, b), c in study.comparisons().items():
        parts += [f"### {a} -> {b}", "", _md_table(c.propensity_bins()[["bin", "n", "realized_after", "rate"]])]
    return "\n".join(parts)


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
    if comps:
        figs.append(("Propensity bins", propensity_figure({f"{a} → {b}": c.propensity_bins() for (a, b), c in comps.items()})))
    if study.audits:
        crossovers = {f"{a} / {b}": c.crossovers() for (a, b), c in comps.items()}
        figs.append(("pass@k curves", pass_at_k_figure(
            {**study.audits, **{f"{n} (K={e.k})": e for n, e in study.extended.items()}}, crossovers)))
    body = []
    for title, fig in figs:
        body.append(f"<h2>{html.escape(title)}</h2>")
        body.append(fig.to_html(full_html=False, include_plotlyjs=False, default_width="100%", default_height="480px"))
    p = study.protocol
    page = f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>reachlens training audit</title>
<script type="text/javascript">{get_plotlyjs()}</script>
<style>body{{font-family:sans-serif;max-width:1100px;margin:2em auto;}} .tbl td,.tbl th{{padding:4px 10px;text-align:right}}</style>
</head><body>
<h1>Training audit: realized vs reachable</h1>
<p>Task <code>{html.escape(p.task)}</code> ({html.escape(p.split)}), K={p.k} at T={p.temperature}, top-p {p.top_p},
{p.max_new_tokens} new tokens, prompt format <code>{html.escape(str(p.prompt_format))}</code>,
grader <code>{html.escape(str(p.grader))}</code>, seed {p.seed}, protocol <code>{p.hash}</code>.</p>
<h2>Headline</h2>{_html_table(study.headline())}
<h2>pass@k crossovers</h2>{_html_table(study.pass_at_k_crossovers())}
<p>{html.escape(CROSSOVER_NOTE)}</p>
<h2>Budget control</h2>{_html_table(study.budget_control())}
<h2>Prompt-format control</h2>{_html_table(study.format_control())}
<p>{html.escape(FORMAT_CONTROL_NOTE)}</p>
{''.join(body)}
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
