"""The viewer's HTML fragments: the set chooser, the filter bar, the question list and one question.

Every string from a run goes through :func:`reachlens.escape.html_text` here, and nowhere else is run text put in
a page: the static page's script puts these fragments in place and adds no text of its own. The fragments carry no
script and no style attribute (the page's content security policy allows neither), only ``data-*`` attributes the
script reads.
"""

from __future__ import annotations

import math
import re
import numbers
from collections.abc import Callable
from typing import Any
from urllib.parse import quote, urlencode

import numpy as np
import pandas as pd

from reachlens.errors import ReachlensError
from reachlens.escape import html_text as h
from reachlens.store.view_address import FATE_FILTERS
from reachlens.view.fragments import answer_groups, problem_fragment
from reachlens.view.query import View, paired_figures, select
from reachlens.view.source import GROUP_COLUMNS, QuestionSet

__all__ = ["answer_groups", "controls_fragment", "list_fragment", "problem_fragment", "prompt_fragment",
           "question_fragment", "sample_fragment", "sets_fragment", "STATUS_FILTERS"]

_NAMES_QUESTION = re.compile(r"\bquestion\b")
"""A filter naming the ``question`` column (it needs the texts)."""
ROWS_SHOWN = 2000
"""The most rows the list shows at once (the count says how many matched)."""

STATUS_FILTERS = {"realized": "{p}realized", "reachable, not realized": "{p}reachable and not {p}realized",
                  "not reachable": "not {p}reachable"}
"""Status filters of one side (``{p}``: ``base_``, ``trained_`` or nothing for an audit)."""

_LIST_COLUMNS = {
    "audit": ["question_id", "question", "gold", "deployed_answer", "status", "n_correct", "n_scored", "propensity"],
    "comparison": ["question_id", "question", "gold", "realized_fate", "reach_fate", "base_answer", "trained_answer",
                   "base_n_correct", "trained_n_correct", "base_n_scored", "base_propensity", "trained_propensity"],
    "probe": ["question_id", "question", "gold", "deployed_answer", "status", "reached_by", "n_correct", "n_candidates"],
    "routing": ["question_id", "question", "gold", "deployed_answer", "status", "n_candidates", "n_unique",
                "n_answers"],
    "recognition": ["question_id", "question", "gold", "rec_choice", "rec_choice_norm", "rec_margin",
                    "deployed_answer", "status"],
}
RECOGNITION_FILTERS = {
    "recognized, generated wrong": "rec_correct and deployed_scored and not realized",
    "recognized and generated": "rec_correct and realized", "generated, not recognized": "realized and not rec_correct",
    "neither": "not rec_correct and not realized"}
"""A recognition run's filters (recognition's pick against the greedy generation)."""
_SORTS = {"audit": ["propensity", "n_correct"], "probe": ["propensity", "n_correct"],
          "routing": ["n_unique", "n_answers"], "recognition": ["rec_margin"],
          "comparison": ["base_propensity", "trained_propensity", "base_n_correct", "trained_n_correct"]}


def _cell(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return '<td class="na">-</td>'
    if isinstance(value, (bool, np.bool_)):
        return f"<td>{'yes' if value else 'no'}</td>"
    if isinstance(value, numbers.Integral):
        return f'<td class="num">{int(value)}</td>'
    if isinstance(value, float):
        return f'<td class="num">{value:.3f}</td>'
    return f"<td>{h(value)}</td>"


def sets_fragment(sets: list[QuestionSet], current: str | None) -> str:
    """The menu of question sets (comparisons first)."""
    opts = []
    for s in sets:
        mark = "" if s.status == "complete" else f" [{s.status}]"
        chosen = " selected" if s.key == current else ""
        opts.append(f'<option value="{h(s.key)}"{chosen}>{h(s.title + mark)}</option>')
    return f'<select id="set-menu" name="set">{"".join(opts)}</select>'


def controls_fragment(qs: QuestionSet) -> str:
    """The set's filter menus (each writes its expression into the filter) and its sort menu."""
    menus = []
    if qs.paired:
        menus.append(_menu("fate", "fate", FATE_FILTERS))
        for side in ("base", "trained"):
            menus.append(_menu(f"status-{side}", f"{side} status",
                               {k: v.format(p=f"{side}_") for k, v in STATUS_FILTERS.items()}))
    elif qs.kind == "recognition":
        menus.append(_menu("status", "status", RECOGNITION_FILTERS))
    else:
        menus.append(_menu("status", "status", {k: v.format(p="") for k, v in STATUS_FILTERS.items()}))
    if qs.kind == "probe":
        menus.append(_menu("family", "reached by", _family_filters(qs)))
    sorts = _SORTS[qs.kind]
    sort = ['<option value="">task order</option>'] + [
        f'<option value="{h(d + c)}">{h(c)} {"high first" if d else "low first"}</option>' for c in sorts
        for d in ("-", "")]
    return "".join(menus) + f'<label>sort <select id="sort-menu">{"".join(sort)}</select></label>'


def _family_filters(qs: QuestionSet) -> dict[str, str]:
    """A probe run's filters by the family that reached a question, and by it alone."""
    try:
        cols = [c for c in qs.table(wait=False).columns if c.endswith("_reached")]
    except ReachlensError:
        return {}
    out = {}
    for col in cols:
        name = col[: -len("_reached")]
        out[name] = col
        out[f"{name} alone"] = " and ".join([col, "not realized", *(f"not {c}" for c in cols if c != col)])
    return out


def _menu(name: str, label: str, choices: dict[str, str]) -> str:
    opts = [f'<option value="">{h(label)}: any</option>'] + [
        f'<option value="{h(expr)}">{h(label)}: {h(words)}</option>' for words, expr in choices.items()]
    return f'<select class="preset" data-menu="{h(name)}">{"".join(opts)}</select>'


def _banner(qs: QuestionSet) -> str:
    return "" if qs.problem is None else f'<p class="problem">{h(qs.problem)}</p>'


def list_fragment(qs: QuestionSet, view: View, href: Callable[[str], str] | None = None, wait: bool = True) -> str:
    """The set's question list under ``view``: how many rows, a comparison's paired figures of them, the rows
    (each question id a link to ``href(question_id)`` when given: a static export's pages). ``wait=False``: without
    waiting for the questions' texts (:meth:`QuestionSet.table`) unless the search or the filter needs them; the
    table then says it is ``data-pending`` and the page asks again with ``wait``."""
    table = qs.table(wait=wait or bool(view.search.strip()) or bool(_NAMES_QUESTION.search(view.filter)))
    pending = not qs.texts_ready
    rows = select(table, view)
    head = f'<h2>{h(qs.title)}</h2>{_banner(qs)}<p class="count" id="count">{len(rows)} of {len(table)} questions</p>'
    if pending:
        head += '<p class="pending">the questions\' texts are being rebuilt from the task; they fill in here</p>'
    stats = _paired(rows, view) if qs.paired else ""
    cols = [c for c in _LIST_COLUMNS[qs.kind] if c in rows.columns]
    if qs.kind == "routing":  # each selector's pick
        cols += [c for c in rows.columns if c.endswith("_answer") and c != "deployed_answer"]
    body = []
    for rec in rows.head(ROWS_SHOWN).itertuples(index=False):
        r = rec._asdict()
        qid = h(quote(str(r["question_id"]), safe=""))  # the id as the address holds it (control bytes too)
        first = _cell(r[cols[0]]) if href is None else f'<td><a href="{h(href(r[cols[0]]))}">{h(r[cols[0]])}</a></td>'
        body.append(f'<tr data-qid="{qid}">' + first + "".join(_cell(r[c]) for c in cols[1:]) + "</tr>")
    more = f'<p class="count">the first {ROWS_SHOWN} shown</p>' if len(rows) > ROWS_SHOWN else ""
    header = "".join(f"<th>{h(c).replace('_', '_<wbr>')}</th>" for c in cols)  # breaks after "_" only
    mark = ' data-pending="texts"' if pending else ""
    return (f'{head}{stats}<table id="questions"{mark}><thead><tr>{header}</tr></thead><tbody>{"".join(body)}</tbody>'
            f"</table>{more}")


def _paired(rows: pd.DataFrame, view: View) -> str:
    if not len(rows):
        return ""
    f = paired_figures(rows)
    mark = ('<span class="posthoc">post hoc: these questions were chosen after the data was seen; the intervals '
            "and p-values describe them, they do not test a hypothesis made before</span>") if view.post_hoc else \
        '<span class="prereg">every question of the comparison</span>'

    def delta(name: str) -> str:
        lo, hi = f[f"{name}_ci"]
        mde = f[f"{name}_mde"]
        mde_text = "undefined at this n" if math.isnan(mde) else f"{mde:.3f}"
        return f"{f[name]:+.3f} [{lo:+.3f}, {hi:+.3f}], MDE {mde_text}"

    items = [("n", f["n"]), ("gained", f["gained"]), ("lost", f["lost"]),
             ("McNemar p (realized)", f"{f['mcnemar_realized_p']:.3g}"), ("delta D [95% CI]", delta("delta_D")),
             ("entered", f["entered"]), ("left", f["left"]),
             ("McNemar p (reachable)", f"{f['mcnemar_reachable_p']:.3g}"), ("delta O_K [95% CI]", delta("delta_O_K")),
             ("gained from base-reachable", f["gained_from_base_reachable"])]
    dl = "".join(f'<dt>{h(k)}</dt><dd data-stat="{h(k)}">{h(v)}</dd>' for k, v in items)
    return f'<section id="paired"><h3>Paired figures of these questions</h3>{mark}<dl>{dl}</dl></section>'


def _side_column(qs: QuestionSet, i: int, qid: str) -> str:
    side = qs.sides[i]
    row = side.questions()
    row = row[row["question_id"] == qid]
    if not len(row):
        return f'<div class="side"><h3>{h(side.name)}</h3>{problem_fragment("no such question in this audit")}</div>'
    r = row.iloc[0]
    grade = "correct" if bool(r["realized"]) else "wrong" if bool(r["deployed_scored"]) else "ungraded"
    samples = side.samples(qid, GROUP_COLUMNS)
    groups = answer_groups(samples)
    n_ok = int((samples["correct"].astype(bool) & samples["scored"].astype(bool)).sum())
    parts = [f'<div class="side" data-side="{i}"><h3>{h(side.name)}</h3>',
             f'<p>deployed (greedy): <b class="{grade}">{h(r["deployed_answer"])}</b> ({grade}, '
             f'{h(r["deployed_finish"])})</p>',
             f'<details class="sample" data-side="{i}" data-idx="deployed"><summary>deployed text</summary>'
             f'<pre></pre></details>',
             f'<p class="k">{n_ok} of {len(samples)} samples correct, {len(groups)} distinct answers</p>',
             '<table class="groups"><thead><tr><th>answer</th><th>samples</th><th>correct</th><th></th></tr></thead>'
             '<tbody>']
    for g in groups:
        mark = '<span class="majority">majority</span>' if g["majority"] else ""
        ok = "correct" if g["correct"] else "wrong"
        answer = "(no answer)" if g["answer"] is None else g["answer"]
        each = "".join(f'<details class="sample" data-side="{i}" data-idx="{int(j)}"><summary>#{int(j)}</summary>'
                       f"<pre></pre></details>" for j in g["idx"])
        parts.append(f'<tr class="{ok}"><td>{h(answer)}</td><td class="num">{g["n"]}</td>'
                     f'<td class="num">{g["correct"]}</td><td>{mark}<details><summary>texts</summary>{each}'
                     f"</details></td></tr>")
    parts.append("</tbody></table></div>")
    return "".join(parts)


def prompt_fragment(qs: QuestionSet, qid: str) -> str:
    """The prompt of ``qid`` as the model saw it, special tokens marked (the task and the tokenizer loaded for it:
    the server sends it apart from the rest of the question), or one line saying why it is not shown."""
    from reachlens.view.prompt import prompt_pieces

    try:
        pieces = prompt_pieces(qs.sides[0].record, qid)
    except ReachlensError as err:
        return problem_fragment(f"prompt not shown: {err}")
    text = "".join(f'<span class="special">{h(t)}</span>' if special else h(t) for t, special in pieces)
    return f'<pre class="prompt">{text}</pre>'


def question_fragment(qs: QuestionSet, qid: str, prompt: bool = True) -> str:
    """One question: its prompt as the model saw it, its gold, and each side's deployment and samples.
    ``prompt=False``: a place for the prompt that the page fills from :func:`prompt_fragment`."""
    table = qs.table(wait=False)
    row = table[table["question_id"] == qid]
    if not len(row):
        raise ReachlensError(f"question {qid!r} is not in {qs.title}")
    shown = (f'<div id="prompt">{prompt_fragment(qs, qid)}</div>' if prompt else
             '<div id="prompt" data-pending="prompt"><p class="pending">rebuilding the prompt</p></div>')
    fate = ""
    if qs.paired:
        r = row.iloc[0]
        fate = f'<p>fate: <b>{h(r["realized_fate"])}</b> (reach: {h(r["reach_fate"])})</p>'
    if qs.kind in ("audit", "comparison"):
        sides = "".join(_side_column(qs, i, qid) for i in range(len(qs.sides)))
    else:
        from reachlens.view.render_runs import run_body

        sides = run_body(qs, qid)
    link = h("?" + urlencode({"set": qs.key, "question": qid}))
    return (f'<h2>question {h(qid)}</h2><p><a href="{link}">link to this question</a></p>'
            f'<p>gold: <b>{h(row.iloc[0]["gold"])}</b></p>{fate}'
            f'<h3>prompt, as the model saw it (special tokens marked)</h3>{shown}<div class="sides">{sides}</div>')


def sample_fragment(qs: QuestionSet, qid: str, side: int, idx: str) -> str:
    """One sample's full text (``idx`` a sample index, or ``deployed`` for the greedy deployment's)."""
    if not 0 <= side < len(qs.sides):
        raise ReachlensError(f"side={side!r} is not one of this set's {len(qs.sides)}")
    audit = qs.sides[side]
    if idx == "deployed":
        row = audit.questions()
        row = row[row["question_id"] == qid]
        return h(row.iloc[0]["deployed_text"]) if len(row) else problem_fragment("no such question")
    if qs.kind in ("probe", "routing"):  # a candidate named by its place among the question's rows
        samples = audit.rows(qid)
        hit = samples.iloc[int(idx):int(idx) + 1] if idx.isdigit() else samples.iloc[0:0]
    else:
        samples = audit.samples(qid)
        hit = samples[samples["candidate_idx"] == int(idx)] if idx.isdigit() else samples.iloc[0:0]
    if not len(hit):
        raise ReachlensError(f"sample {idx!r} of question {qid!r} is not in {audit.name}")
    r = hit.iloc[0]
    return (f'{h(r["text"])}\n<span class="meta">[answer {h(r["answer"])}, '
            f'{"correct" if bool(r["correct"]) else "wrong" if bool(r["scored"]) else "ungraded"}, '
            f'{h(r["finish_reason"])}, {h(r["n_tokens"])} tokens]</span>')
