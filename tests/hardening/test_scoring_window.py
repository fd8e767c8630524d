"""Recognition's scoring window is lm-eval's ``max_length``: given in ``score_options``, ``RecognitionConfig`` and
``reachlens recognize --max-length``, and recorded in the run (issue 25, second pass).

Before issue 25 recognition always used the model config's window, so an lm-eval run with ``max_length`` could not
be reproduced and the recognition ``run.json`` did not say which window it scored with. The reference here is
lm-eval's recipe written out over a plain HuggingFace forward (``../shared/notes/lm-eval-mc-scoring.md``, item 4):
the model reads ``(context + continuation)[-(max_length + 1):][:-1]``, cut from the left.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest
import torch
from hostile import cli

from reachlens.engine import tokenizer_of
from reachlens.engine.scoring import scoring_window
from reachlens.errors import ReachlensError
from reachlens.studies.recognition import RecognitionConfig, score_options
from reachlens.tasks.base import PromptFormat, Question, Task


@torch.no_grad()
def lm_eval_loglik(hf, tok, context: str, continuation: str, max_length: int) -> float:
    whole = tok(context + continuation)["input_ids"]
    cont = whole[len(tok(context)["input_ids"]):]
    inp = whole[-(max_length + 1):][:-1]  # lm-eval: cut from the left, the last token is only a target
    logits = hf(torch.tensor([inp])).logits[0, -len(cont):].float()
    return float(torch.log_softmax(logits, -1).gather(-1, torch.tensor(cont)[:, None]).sum())


def _long_task() -> Task:
    stem = "ab cd " * 12 + "x"
    qs = [Question("t0", {"question": stem}, "A", ("12", "345"), ("A", "B")),
          Question("t1", {"question": "y " * 20}, "B", ("7", "89 0"), ("A", "B"))]
    fmt = PromptFormat("lm_eval", "Question: {question}\nAnswer:")
    return Task("toy", tuple(qs), {"lm_eval": fmt}, "lm_eval", "choice", ("\n",), metadata={"recognition_format": "lm_eval"})


def test_score_options_cuts_each_request_from_the_left_as_lm_eval(tiny_model, tiny_hf) -> None:
    task, tok = _long_task(), tokenizer_of(tiny_model)
    for window in (12, 30):
        opts = score_options(tiny_model, task, RecognitionConfig(max_length=window))
        for row in opts.itertuples():
            q = next(q for q in task.questions if q.question_id == row.question_id)
            context = f"Question: {q.fields['question']}\nAnswer:"
            assert row.loglik == pytest.approx(lm_eval_loglik(tiny_hf, tok, context, " " + row.text, window), abs=2e-4)
    whole = score_options(tiny_model, task)  # the config's window: nothing is cut here
    cut = score_options(tiny_model, task, RecognitionConfig(max_length=12))
    assert (whole["loglik"] - cut["loglik"]).abs().max() > 1e-3  # the window changes the scores


def test_the_window_is_checked_and_resolved_from_the_model(tiny_model) -> None:
    task = _long_task()
    with pytest.raises(ReachlensError, match="max_length=0 must be an integer >= 1"):
        RecognitionConfig(max_length=0)
    with pytest.raises(ReachlensError, match="more than the window 2"):  # as lm-eval asserts
        score_options(tiny_model, task, RecognitionConfig(max_length=2))
    assert RecognitionConfig().resolved(task, tiny_model).max_length == scoring_window(tiny_model) == \
        tiny_model.original_model.config.max_position_embeddings
    assert RecognitionConfig(max_length=9).resolved(task, tiny_model).max_length == 9
    with pytest.raises(ReachlensError, match="not a mapping of"):
        RecognitionConfig.from_dict({"max_lenght": 9})


def test_recognize_records_the_window_it_scored_with(tiny_dir, tiny_hf, tmp_path, capsys) -> None:
    out = tmp_path / "rec"
    args = ["recognize", tiny_dir, "--task", "arith_mc", "--n", "3", "--max-new-tokens", "4", "--min-failures", "1",
            "--out", out]
    code, _, err = cli(capsys, *args, "--max-length", "80")  # 24-character contexts, 63-token options: cut
    assert code in (0, 2) and "Traceback" not in err  # 2: too few failures on a random model (tables kept)
    record = json.loads((out / "run.json").read_text())
    assert record["options"]["config"]["max_length"] == 80
    from reachlens.models import load_tokenizer

    tok = load_tokenizer(str(tiny_dir))
    from reachlens.tasks import load_task
    from reachlens.tasks.arith_mc import load_arith_mc  # noqa: F401  (registers arith_mc)

    task = load_task("arith_mc", n=3)
    fmt = task.format(record["options"]["config"]["recognition_format"])
    opts = pd.read_parquet(out / "options.parquet")
    row = opts.iloc[0]
    q = next(q for q in task.questions if q.question_id == row["question_id"])
    assert row["loglik"] == pytest.approx(lm_eval_loglik(tiny_hf, tok, fmt.render(q), " " + row["text"], 80), abs=2e-4)
    # the same command without the flag is another run (its window is the model's): refused, naming the field
    code, _, err = cli(capsys, *args)
    assert code == 2 and "options.config" in err and "Traceback" not in err
