"""The training-audit report: one self-contained HTML file (plotly.js inlined, no CDN) and Markdown."""

from __future__ import annotations

import html
import math
from pathlib import Path

import pandas as pd

from reachlens.report.figures import accuracy_bars, fate_bars, pass_at_k_figure, propensity_figure
from reachlens.studies.training_audit import TrainingAudit

__all__ = ["write_report", "markdown_summary"]


def _fmt(x) -> str:
    if isinstance(x, float):
        return "undefined" if math.isnan(x) else f"{x:.3f}"
    return str(x)


def _md_table(df: pd.DataFrame) -> str:
    if df.empty:
        return "_(none)_\n"
    head = "| " + " | ".join(df.columns) + " |\n|" + "---|" * len(df.columns) + "\n"
    return head + "".join("| " + " | ".join(_fmt(v) for v in row) + " |\n" for row in df.itertuples(index=False))


def _html_table(df: pd.DataFrame) -> str:
    if df.empty:
        return "<p><em>(none)</em></p>"
    return df.to_html(index=False, float_format=lambda x: "undefined" if math.isnan(x) else f"{x:.3f}",
                      classes="tbl", border=0)


CROSSOVER_NOTE = (
    "crossover_k: the budgets k at which trained - base pass@k changes sign (each the first k of the new "
    "sign); a trained model ahead at small k that the base overtakes at larger k reaches fewer questions "
    "than the base from that budget on. outside_noise: those crossings whose new order holds beyond the paired "
    "95% bootstrap interval over questions of the difference at that k (Comparison.pass_at_k has every k)."
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
        crossings = {f"{a} / {b}": c.crossovers() for (a, b), c in comps.items()}
        figs.append(("pass@k curves", pass_at_k_figure(
            {**study.audits, **{f"{n} (K={e.k})": e for n, e in study.extended.items()}}, crossings)))
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
