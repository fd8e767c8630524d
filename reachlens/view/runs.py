"""The question lists of the runs that are not audits: a probe run, a routing run, a recognition run, and the pairs
of an elicitation (each source beside each of its fine-tuned copies).

* a **probe run** (``reachlens probe``) stores its candidate bank alone (``candidates.parquet``); its list is built
  from the bank's narrow columns (which probe and arm, the answer and its grade; never the texts): the greedy
  deployment's answer and grade, and per probe family (``sampling``, ``graft``, ``placebo``, ...) whether one of
  its candidates was right (``FAMILY_reached``) and how many (``FAMILY_n_correct``), with ``reached_by`` naming the
  families, so ``graft_reached and not sampling_reached`` finds what only the grafts reached;
* a **routing run** (``reachlens route``): its question table (deployment, reach, each selector's pick and grade);
* a **recognition run** (``reachlens recognize``): its question table (the option recognition chose beside the
  greedy generation), with ``status`` saying which of the two was right;
* an **elicitation** (``reachlens elicit``): each source audit and its copy after ``n`` demonstrations, joined as
  ``reachlens compare`` joins two audits (fates, paired figures), the join computed when the pair is first shown.

Each question's gold comes from the run's task, rebuilt as the prompt is (:mod:`reachlens.view.prompt`); where it
cannot be, the gold is missing (a run's own table gives it where it has one).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from reachlens.errors import ReachlensError
from reachlens.store.files import regular_file
from reachlens.store.view_address import family_column

__all__ = ["CANDIDATE_TABLES", "probe_table", "recognition_table", "routing_table"]

CANDIDATE_TABLES = {"audit": "samples", "comparison": "samples", "probe": "candidates", "routing": "candidates",
                    "recognition": "options"}
"""Where each kind of set keeps a question's candidates (its K samples, its bank, its routes, its options)."""
_FIX = "restore it from a copy, or run it again into a new directory"
_BANK_LIST = ["question_id", "probe", "arm", "answer", "correct", "scored"]


def _narrow(path: Path, columns: list[str]) -> pd.DataFrame:
    """``columns`` of a parquet table (the rest never read)."""
    import pyarrow.parquet as pq

    file = regular_file(path, "table")
    try:
        return pq.read_table(file, columns=columns).to_pandas()
    except Exception as err:  # noqa: BLE001 - pyarrow's errors: a damaged table, one line
        raise ReachlensError(f"table {str(path)!r} cannot be read ({type(err).__name__}: {err}); {_FIX}") from None


def _status(realized: pd.Series, reachable: pd.Series) -> pd.Series:
    realized, reachable = realized.fillna(False).astype(bool), reachable.fillna(False).astype(bool)
    words = pd.Series("unreachable", index=realized.index, dtype=object)
    words[reachable & ~realized] = "reachable, not realized"
    words[realized & reachable] = "realized"
    words[realized & ~reachable] = "realized, not reachable"
    return words


def probe_table(path: Path, golds: dict[str, str]) -> pd.DataFrame:
    """A probe run's question list from its bank (``path``: the run directory)."""
    from reachlens.probes.bank import GREEDY, family_of

    file = path / "candidates.parquet"
    if not file.exists():
        raise ReachlensError(f"probe run {str(path)!r} has no candidates table yet; it is not complete")
    bank = _narrow(file, _BANK_LIST)
    bank["hit"] = bank["correct"].astype(bool) & bank["scored"].astype(bool)
    qids = pd.unique(bank["question_id"])
    greedy = bank[bank["probe"] == GREEDY].drop_duplicates("question_id").set_index("question_id")
    out = pd.DataFrame({"question_id": qids})
    out["gold"] = out["question_id"].map(golds)
    out["deployed_answer"] = out["question_id"].map(greedy["answer"])
    out["realized"] = out["question_id"].map(greedy["hit"]).fillna(False).astype(bool)
    out["deployed_scored"] = out["question_id"].map(greedy["scored"]).fillna(False).astype(bool)
    probes = bank[bank["probe"] != GREEDY]
    hits = probes.groupby("question_id", sort=False)["hit"]
    out["n_candidates"] = out["question_id"].map(hits.size()).fillna(0).astype(int)
    out["n_correct"] = out["question_id"].map(hits.sum()).fillna(0).astype(int)
    out["reachable"] = out["realized"] | (out["n_correct"] > 0)
    families = probes["probe"].map(family_of)
    names = list(dict.fromkeys(families))
    for family in names:
        col = family_column(family)
        n = probes[families == family].groupby("question_id", sort=False)["hit"].sum()
        out[f"{col}_n_correct"] = out["question_id"].map(n).fillna(0).astype(int)
        out[f"{col}_reached"] = out[f"{col}_n_correct"] > 0
    reached = out[[f"{family_column(f)}_reached" for f in names]].to_numpy()
    out["reached_by"] = [", ".join(f for f, hit in zip(names, row) if hit) for row in reached]
    out["status"] = _status(out["realized"], out["reachable"])
    out["propensity"] = out["n_correct"] / out["n_candidates"].where(out["n_candidates"] > 0)
    return out


def routing_table(questions: pd.DataFrame, golds: dict[str, str]) -> pd.DataFrame:
    """A routing run's question list: its question table, the gold and each question's status added."""
    out = questions.copy()
    out.insert(1, "gold", out["question_id"].map(golds))
    out["realized"] = out["realized"].astype(bool)
    out["status"] = _status(out["realized"], out["reachable"])
    return out.reset_index(drop=True)


RECOGNITION_STATUS = {(True, True): "recognized and generated", (True, False): "recognized, generated wrong",
                      (False, True): "generated, not recognized", (False, False): "neither"}
"""A recognition run's status words by (recognition right, the greedy generation right)."""


def recognition_table(questions: pd.DataFrame) -> pd.DataFrame:
    """A recognition run's question list: its question table with ``status`` (recognized, generated, both)."""
    out = questions.drop(columns=[c for c in ("deployed_text",) if c in questions.columns]).copy()
    rec, gen = out["rec_correct"].astype(bool), out["realized"].astype(bool)
    out["status"] = [RECOGNITION_STATUS[(bool(a), bool(b))] for a, b in zip(rec, gen)]
    out.loc[~out["deployed_scored"].astype(bool) & rec, "status"] = "recognized, generation ungraded"
    return out.reset_index(drop=True)
