"""Few-shot prompts: the task's own rendering of train demonstrations, written out here by hand.

The references are strings typed in this file from the arith format (``Q: {expr}=?\\nA:`` and the worked
solution) and, for the chat format, from Qwen2.5's chat template markup; the ids are the tokenizers' own.
"""

from __future__ import annotations

import pytest

from reachlens.engine.tokens import encode_prompts
from reachlens.errors import ReachlensError
from reachlens.models.loading import load_tokenizer
from reachlens.protocol import Protocol
from reachlens.tasks import FewShot, Question, Task, draw_demonstrations, fewshot_prompts, load_task
from reachlens.tasks.base import PromptFormat
from reachlens.tasks.chat import bind_chat


@pytest.fixture(scope="module")
def hard():
    return load_task("arith_hard", n=300), load_task("arith_hard", split="train")


def by_hand(d: Question) -> str:
    return "Q: " + d.fields["expr"] + "=?\nA:" + d.solution


def test_plain_prompt_ids_equal_the_demonstrations_written_out(hard):
    task, pool = hard
    protocol = Protocol("arith_hard").resolved(task)
    q = task.questions[0]
    demos = draw_demonstrations(pool, q, 2, seed=0, candidate=0)
    assert all(d.question_id.startswith("arith_hard-train-") for d in demos)
    expected = by_hand(demos[0]) + "\n\n" + by_hand(demos[1]) + "\n\n" + "Q: " + q.fields["expr"] + "=?\nA:"
    assert expected.count(" #### ") == 2 and demos[0].solution.startswith(" ")
    (prompt,) = fewshot_prompts(task, pool, protocol, [q], FewShot(2))
    assert prompt == expected
    tok = load_tokenizer("zoo:locked")
    assert encode_prompts(tok, [prompt]) == encode_prompts(tok, [expected])
    password = Protocol("arith_hard", prompt_format="password").resolved(task)
    (locked,) = fewshot_prompts(task, pool, password, [q], FewShot(1, seed=0, delimiter="\n"))
    key = "?#2405*19550#?\n"
    assert locked == key + by_hand(demos[0]) + "\n" + key + "Q: " + q.fields["expr"] + "=?\nA:"


def test_chat_prompt_ids_equal_the_turns_written_out(hard, shared_tokenizers):
    task, pool = hard
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(shared_tokenizers / "qwen2.5-instruct")
    q = task.questions[3]
    demos = draw_demonstrations(pool, q, 2, seed=5, candidate=1)

    def turn(role: str, text: str) -> str:
        return f"<|im_start|>{role}\n{text}<|im_end|>\n"

    for system, head in ((None, "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."),
                         ("Answer briefly.", "Answer briefly.")):
        protocol = bind_chat(Protocol("arith_hard", prompt_format="chat", system=system).resolved(task), tok)
        expected = (turn("system", head)
                    + "".join(turn("user", "Q: " + d.fields["expr"] + "=?\nA:") + turn("assistant", d.solution[1:])
                              for d in demos)
                    + turn("user", "Q: " + q.fields["expr"] + "=?\nA:") + "<|im_start|>assistant\n")
        (prompt,) = fewshot_prompts(task, pool, protocol, [q], FewShot(2, seed=5), candidate=1, tokenizer=tok)
        assert prompt == expected
        assert encode_prompts(tok, [prompt]) == [tok(expected, add_special_tokens=False)["input_ids"]]


def test_no_question_ever_sees_itself_or_its_answer_among_its_demonstrations(hard):
    task, pool = hard
    train_prompts = {pool.prompt(d) for d in pool.questions}
    test_ids = {q.question_id for q in task.questions}
    seen_sets = set()
    for q in task.questions:
        for candidate in range(4):
            demos = draw_demonstrations(pool, q, 4, seed=0, candidate=candidate)
            assert len({d.question_id for d in demos}) == 4
            assert all(pool.prompt(d) in train_prompts and d.question_id not in test_ids for d in demos)
            assert all(d.gold.strip() != q.gold.strip() and pool.prompt(d) != task.prompt(q) for d in demos), q
            assert demos == draw_demonstrations(pool, q, 4, seed=0, candidate=candidate)  # seeded
            seen_sets.add(tuple(d.question_id for d in demos))
    assert len(seen_sets) == 4 * len(task), "each (question, candidate) its own draw"


def test_a_pool_holding_the_question_and_its_answer_never_shows_them():
    fmt = {"qa": PromptFormat("qa", "Q: {q}\nA:")}
    rows = [Question(f"t{i}", {"q": f"{i}+0"}, str(i % 3)) for i in range(12)]
    test = Task("toy", tuple(rows[:1]), fmt, "qa", "numeric")
    pool = Task("toy", tuple(rows), fmt, "qa", "numeric", data_identity={"split": "train"})
    for candidate in range(20):  # 12 questions, 4 of gold "0" (the question's own among them): 8 admissible
        demos = draw_demonstrations(pool, rows[0], 8, candidate=candidate)
        assert sorted(d.question_id for d in demos) == sorted(r.question_id for r in rows if r.gold != "0")
    with pytest.raises(ReachlensError, match="fewer than n=9"):
        draw_demonstrations(pool, rows[0], 9)
    mc = Question("m0", {"q": "pick"}, "A", choices=("x", "y"), labels=("A", "B"))
    mc_pool = Task("toy", (mc, *(Question(f"m{i}", {"q": f"p{i}"}, "A", ("x", "y"), ("A", "B")) for i in (1, 2))),
                   fmt, "qa", "choice")
    assert {d.question_id for d in draw_demonstrations(mc_pool, mc, 2)} == {"m1", "m2"}  # labels repeat: allowed


def test_a_pool_that_is_not_the_train_split_is_refused(hard):
    task, _ = hard
    protocol = Protocol("arith_hard").resolved(task)
    with pytest.raises(ReachlensError, match="split='train'"):
        fewshot_prompts(task, task, protocol, task.questions[:1], FewShot(1))
    with pytest.raises(ReachlensError, match="n=0"):
        FewShot(0)
