"""One question of a probe run, a routing run or a recognition run, as HTML fragments.

* a probe run: the greedy deployment, then each probe's candidates (each arm apart), grouped by extracted answer
  with counts and grades, the picks of the answer-blind selectors the probe run reports (``majority``, ``logprob``,
  :mod:`reachlens.selectors`) marked, each candidate's text on demand;
* a routing run: each selector's pick and its grade (the run's question table), the evaluations grouped by answer,
  and every route evaluated in order with its answer, grade and objective, its text on demand;
* a recognition run: the options with their log-likelihoods (total and per token), the gold, the option
  recognition picked under each, the option greedy decoding would take, beside the greedy generation.

Every run text goes through :func:`reachlens.escape.html_text`, as in :mod:`reachlens.view.render`; a candidate is
named on the page by its place among the question's rows (``data-idx``), which the sample fragment reads back.
"""

from __future__ import annotations

import math

import pandas as pd

from reachlens.escape import html_text as h
from reachlens.view.fragments import answer_groups, problem_fragment
from reachlens.view.source import QuestionSet

__all__ = ["ROUTES_SHOWN", "run_body"]

ROUTES_SHOWN = 500
"""The most route evaluations a routing question lists (the groups count them all)."""
_PROBE_COLUMNS = ["candidate_idx", "answer", "correct", "scored", "mean_logprob", "probe", "arm", "intervention"]
_ROUTE_COLUMNS = ["candidate_idx", "answer", "correct", "scored", "route", "duplicate", "objective", "mean_logprob"]


def _grade(correct, scored) -> str:
    return "correct" if bool(correct) and bool(scored) else "wrong" if bool(scored) else "ungraded"


def _text(j: int, label: str) -> str:
    return f'<details class="sample" data-side="0" data-idx="{int(j)}"><summary>{h(label)}</summary><pre></pre></details>'


def _groups_table(rows: pd.DataFrame, picks: dict[str, set[str]]) -> str:
    """``rows`` grouped by answer (:func:`~reachlens.view.fragments.answer_groups`, keyed by their place ``row_pos``),
    each group marked with the selectors whose pick it holds (``picks``: selector -> answers)."""
    out = ['<table class="groups"><thead><tr><th>answer</th><th>candidates</th><th>correct</th><th></th></tr>'
           "</thead><tbody>"]
    for g in answer_groups(rows, key="row_pos"):
        answer = "(no answer)" if g["answer"] is None else g["answer"]
        marks = "".join(f'<span class="majority" data-pick="{h(name)}">{h(name)}</span>'
                        for name, answers in picks.items() if g["answer"] is not None and str(g["answer"]) in answers)
        each = "".join(_text(int(j), f"#{int(j)}") for j in g["idx"])
        out.append(f'<tr class="{"correct" if g["correct"] else "wrong"}"><td>{h(answer)}</td>'
                   f'<td class="num">{g["n"]}</td><td class="num">{g["correct"]}</td><td>{marks}'
                   f"<details><summary>texts</summary>{each}</details></td></tr>")
    return "".join(out) + "</tbody></table>"


def _picks(rows: pd.DataFrame, qid: str) -> dict[str, set[str]]:
    """Each answer-blind selector's pick on ``rows`` (its answers: several when tied), as the probe run scores it."""
    from reachlens.probes.summary import SELECTORS
    from reachlens.selectors import select

    bank = rows.assign(question_id=qid)
    out = {}
    for name in SELECTORS:
        chosen = select(bank, name)
        if not len(chosen):
            continue
        answer = chosen["selected_answer"].iloc[0]
        if int(chosen["n_tied"].iloc[0]) > 1:
            out[f"{name} (tied)"] = _tied(rows, name)
        elif answer is not None and not (isinstance(answer, float) and math.isnan(answer)):
            out[name] = {str(answer)}
    return out


def _tied(rows: pd.DataFrame, name: str) -> set[str]:
    """The answers a tied selector averages over: majority's answers with the most eligible votes; logprob's
    candidates with the highest mean log-probability."""
    ok = rows[rows["scored"].astype(bool) & rows["answer"].notna()]
    if name == "majority":
        counts = ok["answer"].astype(str).value_counts()
        return set(counts[counts == counts.max()].index) if len(counts) else set()
    best = ok["mean_logprob"].max()
    return set(ok.loc[ok["mean_logprob"] == best, "answer"].astype(str))


def _probe_body(qs: QuestionSet, qid: str) -> str:
    from reachlens.probes.bank import GREEDY

    rows = qs.sides[0].rows(qid, _PROBE_COLUMNS).assign(row_pos=lambda d: range(len(d)))
    parts = []
    greedy = rows[rows["probe"] == GREEDY]
    if len(greedy):
        g = greedy.iloc[0]
        grade = _grade(g["correct"], g["scored"])
        parts.append(f'<p>deployed (greedy): <b class="{grade}">{h(g["answer"])}</b> ({grade})</p>'
                     + _text(int(g["row_pos"]), "deployed text"))
    for (probe, arm), sub in rows[rows["probe"] != GREEDY].groupby(["probe", "arm"], sort=False):
        n_ok = int((sub["correct"].astype(bool) & sub["scored"].astype(bool)).sum())
        kind = " (an intervention)" if bool(sub["intervention"].any()) else ""
        arm_words = "" if arm == probe else f", arm {arm}"
        parts.append(f'<div class="probe" data-probe="{h(probe)}" data-arm="{h(arm)}"><h3>{h(probe)}{h(arm_words)}'
                     f'{h(kind)}</h3><p class="k">{n_ok} of {len(sub)} candidates correct, '
                     f'{sub["answer"].nunique()} distinct answers</p>{_groups_table(sub, _picks(sub, qid))}</div>')
    return f'<div class="probes">{"".join(parts)}</div>'


def _routing_body(qs: QuestionSet, qid: str) -> str:
    table = qs.table(wait=False)
    row = table[table["question_id"] == qid].iloc[0]
    rows = qs.sides[0].rows(qid, _ROUTE_COLUMNS).assign(row_pos=lambda d: range(len(d)))
    names = [c[: -len("_answer")] for c in table.columns if c.endswith("_answer") and c != "deployed_answer"]
    picks = {n: {str(row[f"{n}_answer"])} for n in names if isinstance(row[f"{n}_answer"], str)}
    sel = "".join(f'<li data-selector="{h(n)}">{h(n)}: <b>{h(row[f"{n}_answer"])}</b> '
                  f'({"correct" if row[n] == 1 else "wrong" if row[n] == 0 else "undefined"})</li>' for n in names)
    grade = _grade(row["realized"], row["deployed_scored"])
    n_ok = int((rows["correct"].astype(bool) & rows["scored"].astype(bool)).sum())
    routes = "".join(
        f'<tr class="{_grade(r.correct, r.scored)}"><td class="num">{int(r.candidate_idx)}</td><td>{h(r.route)}</td>'
        f'<td>{h(r.answer)}</td><td>{_grade(r.correct, r.scored)}</td><td>{"yes" if r.duplicate else ""}</td>'
        f'<td class="num">{h(f"{r.objective:.3f}" if pd.notna(r.objective) else "-")}</td>'
        f"<td>{_text(int(r.row_pos), 'text')}</td></tr>" for r in rows.head(ROUTES_SHOWN).itertuples(index=False))
    more = f'<p class="count">the first {ROUTES_SHOWN} shown</p>' if len(rows) > ROUTES_SHOWN else ""
    return (f'<div class="side" data-side="0"><p>deployed (identity route, greedy): <b class="{grade}">'
            f'{h(row["deployed_answer"])}</b> ({grade})</p><h3>selectors\' picks</h3><ul>{sel}</ul>'
            f'<p class="k">{n_ok} of {len(rows)} evaluations correct, {rows["route"].nunique()} distinct routes, '
            f'{rows["answer"].nunique()} distinct answers</p>{_groups_table(rows, picks)}'
            '<h3>routes, in the order evaluated</h3><table class="routes"><thead><tr><th>#</th><th>route</th>'
            '<th>answer</th><th>grade</th><th>duplicate</th><th>objective</th><th></th></tr></thead><tbody>'
            f"{routes}</tbody></table>{more}</div>")


def _recognition_body(qs: QuestionSet, qid: str) -> str:
    side = qs.sides[0]
    q = side.questions()
    row = q[q["question_id"] == qid].iloc[0]
    opts = side.rows(qid).sort_values("option", kind="stable")
    best, best_norm = opts["loglik"].max(), opts["loglik_norm"].max()
    body = []
    for r in opts.itertuples(index=False):
        marks = [w for w, on in (("gold", r.gold), ("recognition's pick", r.loglik == best),
                                 ("per-token pick", r.loglik_norm == best_norm), ("greedy's option", r.is_greedy)) if on]
        body.append(f'<tr class="{"correct" if r.gold else "wrong"}" data-option="{int(r.option)}"><td>{h(r.label)}</td>'
                    f'<td>{h(r.text)}</td><td class="num">{r.loglik:.3f}</td><td class="num">{r.loglik_norm:.3f}</td>'
                    f'<td class="num">{int(r.n_tokens)}</td><td>{h(", ".join(marks))}</td></tr>')
    grade = _grade(row["realized"], row["deployed_scored"])
    rec = "correct" if bool(row["rec_correct"]) else "wrong"
    return (f'<div class="side" data-side="0"><p>recognition: <b class="{rec}">{h(row["rec_choice"])}</b> ({rec}; '
            f'per token: {h(row["rec_choice_norm"])}, margin {float(row["rec_margin"]):.3f})</p>'
            f'<p>generation (greedy): <b class="{grade}">{h(row["deployed_answer"])}</b> ({grade}, '
            f'{h(row["deployed_finish"])})</p>{_text_deployed()}'
            '<h3>options, with their log-likelihoods</h3><table class="options"><thead><tr><th>label</th>'
            '<th>option</th><th>log-likelihood</th><th>per token</th><th>tokens</th><th></th></tr></thead><tbody>'
            f'{"".join(body)}</tbody></table></div>')


def _text_deployed() -> str:
    return ('<details class="sample" data-side="0" data-idx="deployed"><summary>generated text</summary><pre></pre>'
            "</details>")


_BODIES = {"probe": _probe_body, "routing": _routing_body, "recognition": _recognition_body}


def run_body(qs: QuestionSet, qid: str) -> str:
    """The part of a question's page that is its run's own (below the prompt and the gold)."""
    body = _BODIES.get(qs.kind)
    return problem_fragment(f"no view of a {qs.kind} run's question") if body is None else body(qs, qid)
