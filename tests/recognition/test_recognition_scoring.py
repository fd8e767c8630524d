"""Recognition scores equal a direct lm-eval-style log-likelihood computed with plain HuggingFace."""

from __future__ import annotations

import pytest
import torch
from conftest import FIXTURE_DATA

from reachlens.engine import tokenizer_of
from reachlens.protocol import Protocol
from reachlens.studies.recognition import RecognitionConfig, compare_modes, encode_pair, loglikelihoods, score_options
from reachlens.tasks import load_task
from reachlens.tasks.arith_mc import load_arith_mc
from reachlens.tasks.base import PromptFormat, Question, Task


@torch.no_grad()
def direct_loglik(hf, tok, context: str, continuation: str, window: int = 512) -> float:
    """lm-eval's recipe written out: whole-string encoding, left truncation, float32 log-softmax sum."""
    whole = tok(context + continuation)["input_ids"]
    cont = whole[len(tok(context)["input_ids"]):]
    inp = whole[-(window + 1):][:-1]
    logits = hf(torch.tensor([inp])).logits[0, -len(cont):].float()
    return float(torch.log_softmax(logits, -1).gather(-1, torch.tensor(cont)[:, None]).sum())


REQUESTS = [
    ("Q: 12+34=?\nA:", " 12+34=46 #### 46"),
    ("Q: 12+34=?\nA:", " 12+34=47 #### 47"),
    ("Q: 7*8=?\nA:", " 56"),
    ("hello world", " ab"),
]


def test_loglikelihoods_equal_direct_hf_computation(tiny_model, tiny_hf):
    tok = tokenizer_of(tiny_model)
    ours = loglikelihoods(tiny_model, REQUESTS, batch_size=3)  # a padded batch and a lone row
    for (ctx, cont), r in zip(REQUESTS, ours):
        assert r.logprob == pytest.approx(direct_loglik(tiny_hf, tok, ctx, cont), abs=2e-4, rel=1e-5)
        assert r.n_tokens == len(cont)
    alone = [loglikelihoods(tiny_model, [q])[0].logprob for q in REQUESTS]
    assert alone == pytest.approx([r.logprob for r in ours], abs=2e-4)


def test_lm_eval_encoding_rules(tiny_model):
    tok = tokenizer_of(tiny_model)
    ctx, cont = encode_pair(tok, "Q: 1+1=?\nA: ", "2")  # trailing space moves into the continuation
    assert ctx == tok("Q: 1+1=?\nA:")["input_ids"]  # the tokenizer's default special tokens
    assert tok.decode(cont) == " 2" and cont == tok("Q: 1+1=?\nA: 2")["input_ids"][len(ctx):]
    ctx, cont = encode_pair(tok, "", "ab")  # lm-eval's prefix_token_id: the BOS (the EOS when there is none)
    assert tok.bos_token_id is not None and ctx == [tok.bos_token_id] and tok.decode(cont) == "ab"


def test_left_truncation_to_the_window(tiny_model, tiny_hf):
    tok = tokenizer_of(tiny_model)
    ctx, cont = "ab " * 30 + "Q:", " 12"
    r = loglikelihoods(tiny_model, [(ctx, cont)], max_length=40)[0]
    assert r.logprob == pytest.approx(direct_loglik(tiny_hf, tok, ctx, cont, window=40), abs=2e-4)


def _toy_task() -> Task:
    qs = [
        Question("t0", {"question": "a b"}, "B", ("cd", "ef gh", "cd"), ("A", "B", "C")),
        Question("t1", {"question": "x"}, "A", ("yy", "zzzz"), ("A", "B")),
    ]
    fmt = PromptFormat("lm_eval", "Question: {question}\nAnswer:")
    return Task("toy", tuple(qs), {"lm_eval": fmt}, "lm_eval", "choice", ("\n",), metadata={"recognition_format": "lm_eval"})


def test_acc_and_acc_norm_follow_lm_eval(tiny_model, tiny_hf):
    task = _toy_task()
    opts = score_options(tiny_model, task)
    tok = tokenizer_of(tiny_model)
    for row in opts.itertuples():
        q = next(q for q in task.questions if q.question_id == row.question_id)
        ref = direct_loglik(tiny_hf, tok, f"Question: {q.fields['question']}\nAnswer:", " " + row.text)
        assert row.loglik == pytest.approx(ref, abs=2e-4)
        assert row.loglik_norm == pytest.approx(row.loglik / len(row.text))  # characters, without the space
    res = compare_modes(tiny_model, task, Protocol.greedy(task.name, max_new_tokens=4))
    q0 = res.questions.iloc[0]
    o0 = opts[opts.question_id == "t0"]
    assert o0.loglik.iloc[0] == o0.loglik.iloc[2]  # identical options tie ...
    best = o0.loglik.max()
    assert q0.rec_choice == "ABC"[[i for i, v in enumerate(o0.loglik) if v == best][0]]  # ... and the first wins
    assert bool(q0.rec_correct) == (q0.rec_choice == "B")


MC_BENCHMARKS = [("arc", "arc_challenge/ARC-Challenge-Test.jsonl"), ("piqa", "piqa"), ("logiqa", "logiqa/Test.txt")]


@pytest.mark.parametrize("name,rel", MC_BENCHMARKS)
def test_benchmark_fixtures_score_like_direct_hf(tiny_model, tiny_hf, name, rel):
    _scores_like_direct_hf(tiny_model, tiny_hf, load_task(name, FIXTURE_DATA / rel, n=2))


@pytest.mark.parametrize("name,rel", MC_BENCHMARKS)
def test_real_benchmarks_score_like_direct_hf(tiny_model, tiny_hf, shared_data, name, rel):
    _scores_like_direct_hf(tiny_model, tiny_hf, load_task(name, shared_data / rel, n=2))


def _scores_like_direct_hf(tiny_model, tiny_hf, task):
    opts = score_options(tiny_model, task, RecognitionConfig(batch_size=4))
    assert len(opts) == sum(len(q.choices) for q in task.questions) and opts.gold.sum() == 2
    q = task.questions[0]
    context = task.format("lm_eval").render(q)
    first = opts[opts.question_id == q.question_id].iloc[0]
    # LogiQA prompts exceed the tiny model's 512 positions: this also checks the left truncation
    assert first.loglik == pytest.approx(direct_loglik(tiny_hf, tokenizer_of(tiny_model), context, " " + q.choices[0]),
                                         abs=5e-4, rel=1e-5)


def test_arith_mc_recognition_scores_the_worked_solution(tiny_model, tiny_hf):
    task = load_arith_mc(n_test=3)
    opts = score_options(tiny_model, task)
    q = task.questions[0]
    gold = opts[(opts.question_id == q.question_id) & opts.gold].iloc[0]
    assert " " + gold.text == q.solution
    assert gold.loglik == pytest.approx(direct_loglik(tiny_hf, tokenizer_of(tiny_model), f"Q: {q.fields['expr']}=?\nA:",
                                                      q.solution), abs=2e-4)
