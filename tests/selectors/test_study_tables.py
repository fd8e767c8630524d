"""The selection gap where a reader meets it: a study's checkpoint table and its Markdown report, against a
plurality vote computed here with ``collections.Counter`` over the samples each audit holds (ties averaged)."""

from __future__ import annotations

import dataclasses

from collections import Counter

import pandas as pd
import pytest

from reachlens import Protocol
from reachlens.report.tables import display_tables, markdown_summary
from reachlens.store import RunDir, RunRecord, read_run
from reachlens.studies import AuditResult
from reachlens.studies.training_audit import StudyLayout, StudyPlan
from reachlens.tasks import load_task

P = Protocol("arith", k=4, temperature=1.0, max_new_tokens=12)
# per model, per question: its four sampled answers (gold "1"; None: no answer) and its greedy answer
ANSWERS = {
    "base": [(["1", "2", "2", "1"], "1"), (["3", "3", "1", None], "3"), (["2", "2", "2", "2"], "2"),
             (["1", "1", "1", "4"], "4"), ([None, None, "5", "1"], "1")],
    "grpo": [(["1", "1", "1", "1"], "1"), (["1", "3", "2", None], "1"), (["2", "2", "1", "2"], "2"),
             (["1", "4", "4", "1"], "1"), (["5", "6", "7", "8"], "5")],
}


def audit(spec: str, questions: list[tuple[list, str]]) -> AuditResult:
    qids = [f"q{i}" for i in range(len(questions))]
    samples = pd.DataFrame([{"question_id": qid, "candidate_idx": j, "text": str(a), "answer": a, "correct": a == "1",
                             "scored": True, "finish_reason": "stop", "n_tokens": 1, "mean_logprob": -1.0}
                            for qid, (answers, _) in zip(qids, questions) for j, a in enumerate(answers)])
    n_correct = [sum(a == "1" for a in answers) for answers, _ in questions]
    q = pd.DataFrame({"question_id": qids, "realized": [g == "1" for _, g in questions],
                      "reachable": [c > 0 for c in n_correct], "n_correct": n_correct, "n_scored": P.k, "k": P.k,
                      "propensity": [c / P.k for c in n_correct], "deployed_answer": [g for _, g in questions],
                      "deployed_text": "x", "deployed_scored": True, "deployed_finish": "stop", "gold": "1",
                      "labels": None})
    return AuditResult.new(P.resolved(load_task("arith", n=1)), {"spec": spec, "fingerprint": spec}, q, samples,
                       {"generator": "test"})


def counter_majority(questions: list[tuple[list, str]]) -> float:
    """Mean over questions of the expected correctness of a plurality vote (uniform tie-break)."""
    per = []
    for answers, _ in questions:
        votes = Counter(a for a in answers if a is not None)
        top = max(votes.values())
        tied = [a for a, n in votes.items() if n == top]
        per.append(sum(a == "1" for a in tied) / len(tied))
    return sum(per) / len(per)


@pytest.fixture
def study(tmp_path):
    plan = StudyPlan({"base": "zoo:base", "grpo": "zoo:grpo"}, (("base", "grpo"),), P)
    record = RunRecord.new("training_audit", plan.protocol, dict(plan.models), None,
                           {k: v for k, v in plan.to_dict().items() if k != "protocol"})
    run = RunDir(tmp_path)
    run.begin(record)
    for name, questions in ANSWERS.items():
        audit(f"zoo:{name}", questions).save(StudyLayout(tmp_path).audit(name))
    with run.writer():
        run.start(dataclasses.replace(record, children={f"audit:{name}": f"audits/{name}" for name in ANSWERS}))
        run.finish({"wall_seconds": {}})
    return read_run(tmp_path)


def test_the_checkpoint_table_and_the_report_give_maj_K_and_the_selection_gap_of_a_counter_vote(study):
    want = {name: counter_majority(q) for name, q in ANSWERS.items()}
    o_k = {name: sum(any(a == "1" for a in answers) for answers, _ in q) / len(q) for name, q in ANSWERS.items()}
    assert want == pytest.approx({"base": (0.5 + 0 + 0 + 1 + 0.5) / 5, "grpo": (1 + 1 / 3 + 0 + 0.5 + 0) / 5})
    raw = study.checkpoints().set_index("model")
    for name in ANSWERS:
        assert raw.loc[name, "maj_K"] == pytest.approx(want[name])
        assert raw.loc[name, "selection_gap"] == pytest.approx(o_k[name] - want[name])
    shown = {title: df for title, df, _ in display_tables(study)}["checkpoints"].set_index("model")
    column = "selection gap O_K - maj_K [95% CI]"
    for name in ANSWERS:
        assert shown.loc[name, column].startswith(f"{o_k[name] - want[name]:+.3f}"), shown.loc[name, column]
    summary = markdown_summary(study)
    assert column in summary and f"{o_k['base'] - want['base']:+.3f}" in summary
