"""Reports: plotly figures and the self-contained HTML / Markdown training-audit report."""

from reachlens.report.figures import (
    accuracy_bars,
    fate_bars,
    pass_at_k_delta_figure,
    pass_at_k_figure,
    propensity_figure,
)
from reachlens.report.render import display_tables, markdown_summary, text_summary, write_report, write_run_report

__all__ = ["accuracy_bars", "display_tables", "fate_bars", "markdown_summary", "pass_at_k_delta_figure",
           "pass_at_k_figure", "propensity_figure", "text_summary", "write_report", "write_run_report"]
