"""Reports: plotly figures, the tables of a study, and one self-contained HTML / Markdown page for any run."""

from reachlens.report.figures import (
    accuracy_bars,
    fate_bars,
    pass_at_k_delta_figure,
    pass_at_k_figure,
    propensity_figure,
)
from reachlens.report.render import VIEWS, report_run, write_report, write_run_report
from reachlens.report.tables import display_tables, markdown_summary, text_summary

__all__ = ["VIEWS", "accuracy_bars", "display_tables", "fate_bars", "markdown_summary", "pass_at_k_delta_figure",
           "pass_at_k_figure", "propensity_figure", "report_run", "text_summary", "write_report", "write_run_report"]
