"""Reports of any run: one self-contained HTML page (plotly.js inlined, no CDN) and its Markdown.

:func:`report_run` renders a run by its kind: a kind with a study view (:data:`VIEWS`: a training study, one
audit, a comparison) gets the study report (:func:`write_report`: every table of
:func:`~reachlens.report.tables.display_tables` and the figures); any other kind (a routing run, a recognition
run, a causal sweep, a control) gets its record, summary and tables (:func:`write_run_report`), with the figures its kind registers
(:data:`FIGURES`: a routing run's selection chart), unless it registers a page of its own (:data:`PAGES`: a probe
run's, :mod:`reachlens.report.probe_report`). A new kind of
run is rendered the second way until it registers a view here.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from reachlens._registry import Registry
from reachlens.report.figures import (
    CAPTIONS,
    accuracy_bars,
    elicitation_figure,
    fate_bars,
    pass_at_k_delta_figure,
    pass_at_k_figure,
    propensity_figure,
    routing_selection_figure,
    trajectory_figure,
)
from reachlens.escape import html_text as esc
from reachlens.escape import md_text
from reachlens.report.page import html_table, kv_table, write_report_files
from reachlens.report.probe_report import write_probe_report
from reachlens.report.view_links import pair_keys, question_links, viewer_section
from reachlens.report.tables import bins_table, display_tables, heading, markdown_summary, md_table, report_title
from reachlens.store import read_run
from reachlens.studies.study_view import StudyView
from reachlens.store.view_address import VIEW_PORT

__all__ = ["FIGURES", "PAGES", "VIEWS", "report_run", "write_report", "write_run_report"]

VIEWS: Registry[Callable[[Any], StudyView]] = Registry("report view")
"""Kind of run -> the study view its report shows."""
VIEWS.register("training_audit", lambda run: run)
VIEWS.register("audit", StudyView.of_audit)
VIEWS.register("comparison", StudyView.of_comparison)
PAGES: Registry[Callable[..., tuple[Path, Path]]] = Registry("report page")
"""Kind of run -> the page writer of its own report (``fn(run, out, *, force)``)."""
PAGES.register("probe", write_probe_report)
FIGURES: Registry[Callable[[Any], list[tuple[str, Any, str]]]] = Registry("report figures")
"""Kind of run -> the figures of its generic page, ``fn(run) -> [(title, figure, caption), ...]``."""
FIGURES.register("routing", lambda run: [(
    "Reachable vs selected at a matched budget",
    routing_selection_figure(run.summary(), run.selectors, run.config.budget), CAPTIONS["routing_selection_figure"])])
FIGURES.register("elicitation", lambda run: [(
    "Training-based reach" + (f" (placebo {p['kind']}: not correct demonstrations)"
                              if (p := run.record.options.get("placebo")) else ""),
    elicitation_figure(run.uplift(), run.difference()), CAPTIONS["elicitation_figure"])])


def report_run(run: Any, out: str | Path | None = None, *, force: bool = False) -> tuple[Path, Path]:
    """Write ``report.html`` and ``report.md`` of ``run`` (a run, or its directory) into ``out`` (default: the
    run's directory), rendered by its kind; return their paths. A ``report.html`` or ``report.md`` there that
    reachlens did not write is refused unless ``force``.

    >>> report_run("runs/demo")  # doctest: +SKIP
    """
    run = read_run(run) if isinstance(run, (str, Path)) else run
    out = out if out is not None else run.location
    if run.kind in VIEWS:
        study = VIEWS[run.kind](run)
        keys = pair_keys(run, list(study.comparisons()))
        return write_report(study, out, force=force, status=run.record.status,
                            viewer=viewer_section(study.comparisons(), keys, str(run.location)))
    if run.kind in PAGES:
        return PAGES[run.kind](run, out, force=force)
    return write_run_report(run, out, force=force)


def _figures(study: StudyView) -> list[tuple[str, Any, str]]:
    comps = study.comparisons()
    figs = []  # (title, figure, caption: what one mark is)
    if comps:
        figs.append(("Per-question fates", "fate_bars", fate_bars(comps)))
    if study.audits:
        figs.append(("Realized vs reachable", "accuracy_bars", accuracy_bars(study.audits)))
    trajectory = study.trajectory()
    if len(trajectory) > 1:
        figs.append(("Realization and reachability over training", "trajectory_figure",
                     trajectory_figure(trajectory, study.protocol.k)))
    if comps:
        figs.append(("Propensity bins", "propensity_figure", propensity_figure(
            {f"{a} → {b}": c.propensity_bins() for (a, b), c in comps.items()})))
    if study.audits:
        crossovers = {f"{a} / {b}": (a, b, c.crossovers()) for (a, b), c in comps.items()}
        drawn = study.plan.paired_models  # a trajectory-only checkpoint has the trajectory figure
        figs.append(("pass@k curves", "pass_at_k_figure", pass_at_k_figure(
            {**{n: r for n, r in study.audits.items() if n in drawn},
             **{f"{n} (K={e.k})": e for n, e in study.extended.items()}}, crossovers)))
    if comps:
        figs.append(("pass@k difference with its interval", "pass_at_k_delta_figure", pass_at_k_delta_figure(
            {f"{a} → {b}": c.pass_at_k_curve() for (a, b), c in comps.items()})))
    return [(title, fig, CAPTIONS[name]) for title, name, fig in figs]


def _chart(title: str, fig: Any, caption: str) -> list[str]:
    """One figure on a page: its heading, the figure (plotly.js inlined once by the page) and its caption."""
    return [f"<h2>{esc(title)}</h2>", fig.to_html(full_html=False, include_plotlyjs=False, default_width="100%",
                                                  default_height=f"{fig.layout.height or 480}px"),
            f"<p class=note>{esc(caption)}</p>"]


def write_report(study: StudyView, out: str | Path, *, force: bool = False,
                 status: str = "complete", viewer: str = "") -> tuple[Path, Path]:
    """Write the study report (``report.html`` and ``report.md``) of ``study`` into ``out``; return their paths
    (files there that reachlens did not write are refused unless ``force``; a run whose ``status`` is not
    complete is said to be unfinished at the top of both; ``viewer``: the section of links into ``reachlens view``,
    :func:`~reachlens.report.view_links.viewer_section`, below the headline tables)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    charts = [html for title, fig, caption in _figures(study) for html in _chart(title, fig, caption)]
    sections = [(title, f"<h2>{esc(heading(title))}</h2>{html_table(df)}"
                 + (f"<p class=note>{esc(note)}</p>" if note else ""))
                for title, df, note in display_tables(study)]
    headlines = "".join(html for title, html in sections if title.startswith("headline"))
    rest = "".join(html for title, html in sections if not title.startswith("headline"))
    p = study.protocol
    comps = study.comparisons()
    bins = "".join(f"<h3>{esc(a)} → {esc(b)}</h3>" + html_table(bins_table(c.propensity_bins()))
                   for (a, b), c in comps.items())
    if comps:
        bins = ("<h2>Propensity bins</h2><p class=note>Base-reachable, base-unrealized questions; rate: realized "
                f"after training, with its 95% Wilson interval.</p>\n{bins}")
    title = report_title(study)
    heading_html = f"{esc(title)}: realized vs reachable"
    body = f"""<h1>{heading_html}</h1>
<p>Task <code>{esc(p.task)}</code> ({esc(p.split)}), K={esc(p.k)} at T={esc(p.temperature)}, top-p {esc(p.top_p)},
{esc(p.max_new_tokens)} new tokens, prompt format <code>{esc(p.prompt_format)}</code>,
grader <code>{esc(p.grader)}</code>, seed {esc(p.seed)}, protocol <code>{esc(p.hash)}</code>.</p>
{headlines}
{viewer}
{''.join(charts)}
{rest}
{bins}"""
    return write_report_files(out, f"reachlens: {title}", body, markdown_summary(study), figures=True, force=force,
                              status=status)


# --- any other run -------------------------------------------------------------------------------------
_TEXT_COLUMNS = ("text", "deployed_text")


def _header(record) -> pd.DataFrame:
    model = record.model
    roles = {role: m for role, m in model.items() if isinstance(m, dict)} if "spec" not in model else {}
    if roles:  # a run over several models records each role's identity (a control's base and trained, ...)
        spec = ", ".join(f"{role}: {m.get('spec', '-')}" for role, m in roles.items())
        fingerprint = ", ".join(f"{role}: {m.get('fingerprint', '-')}" for role, m in roles.items())
    else:
        spec, fingerprint = model.get("spec", "-"), model.get("fingerprint", "-")
    header = [("kind", record.kind), ("status", record.status), ("model", spec), ("fingerprint", fingerprint)]
    if record.protocol is not None:
        header += [(k, str(v)) for k, v in record.protocol.to_dict().items()] + [("protocol hash", record.protocol.hash)]
    header += [(f"options.{k}", json.dumps(v, default=str) if isinstance(v, (dict, list)) else str(v))
               for k, v in record.options.items()]
    header += [("reachlens", str(record.reachlens_version)), ("command", " ".join(record.command or ()) or "-")]
    return pd.DataFrame(header, columns=["field", "value"])


def _flat_summary(summary: dict[str, Any]) -> pd.DataFrame:
    # a number the run could not define is stored as null: shown as "undefined"
    flat = {k: ("undefined" if v is None else f"{v:.3f}" if isinstance(v, float) and math.isfinite(v) else
                "undefined" if isinstance(v, float) else str(v))
            for k, v in summary.items() if not isinstance(v, (dict, list))}
    return pd.DataFrame({"metric": list(flat), "value": list(flat.values())})


def write_run_report(run: Any, out: str | Path | None = None, *, force: bool = False) -> tuple[Path, Path]:
    """Write ``report.html`` and ``report.md`` for any run (a run, or its directory) into ``out`` (default: its
    directory): its record, its summary and its tables (raw text left out); files there that reachlens did not
    write are refused unless ``force``.

    >>> write_run_report("runs/route")  # doctest: +SKIP
    """
    run = read_run(run) if isinstance(run, (str, Path)) else run
    out = Path(out) if out is not None else Path(run.location)
    out.mkdir(parents=True, exist_ok=True)
    head_df, summary_df = _header(run.record), _flat_summary(run.summary())
    title = f"reachlens {run.kind} run"
    md = [f"# {md_text(title)}", "", "## Run", "", md_table(head_df), "## Summary", "", md_table(summary_df)]
    body = [f"<h1>{esc(title)}</h1>"]
    figures = FIGURES[run.kind](run) if run.kind in FIGURES else []
    for name, fig, caption in figures:
        body += _chart(name, fig, caption)
    body += ["<h2>Run</h2>", kv_table(head_df), "<h2>Summary</h2>", kv_table(summary_df)]
    if run.location is not None:
        body.append(f"<p class=note>Each question id opens its page in the viewer while <code>reachlens view "
                    f"{esc(str(run.location))}</code> runs (on 127.0.0.1:{VIEW_PORT} when that port is free).</p>")
    for name, df in run.report_tables().items():
        df = df.drop(columns=[c for c in _TEXT_COLUMNS if c in df.columns])
        md += [f"## {md_text(name)}", "", md_table(df)]
        links = {"question_id": question_links()} if run.location is not None else None
        body += [f"<h2>{esc(name)}</h2>", f'<div class="scroll">{html_table(df, links)}</div>']
    return write_report_files(out, title, "\n".join(body), "\n".join(md), figures=bool(figures), force=force,
                              status=run.record.status)
