"""Tests for the generated ``arith`` task: determinism, disjoint splits, gold and slip arithmetic."""

from __future__ import annotations

import doctest
import hashlib
import os
import random
import re
import subprocess
import sys
from collections import Counter

import pytest

import reachlens.tasks.arith as arith
from reachlens.errors import ReachlensError
from reachlens.tasks.arith import ARITH_ALPHABET, ArithConfig, Slip, Tier
from reachlens.tasks.registry import load_task

STEP = re.compile(r"(-?\d+)([+*-])(\d+)=(-?\d+)")
SOLUTION = re.compile(r" (.+) #### (-?\d+)")


def apply(a: int, op: str, b: int) -> int:
    return a + b if op == "+" else a - b if op == "-" else a * b


def parse_expr(expr: str) -> list[int | str]:
    tokens = re.findall(r"\d+|[+*-]", expr)
    assert "".join(tokens) == expr, expr
    return [int(t) if t.isdigit() else t for t in tokens]


def parse_solution(solution: str) -> tuple[list[tuple[int, str, int, int]], int]:
    m = SOLUTION.fullmatch(solution)
    assert m, solution
    steps = []
    for text in m.group(1).split(";"):
        s = STEP.fullmatch(text)
        assert s, (text, solution)
        steps.append((int(s.group(1)), s.group(2), int(s.group(3)), int(s.group(4))))
    return steps, int(m.group(2))


def evaluate(expr: str) -> int:
    tokens = parse_expr(expr)
    value = tokens[0]
    for op, b in zip(tokens[1::2], tokens[2::2]):
        value = apply(value, op, b)
    return value


def check_clean(expr: str, solution: str, gold: str) -> None:
    """Steps follow the expression left to right, each is right, and #### equals gold."""
    tokens = parse_expr(expr)
    steps, final = parse_solution(solution)
    assert len(steps) == len(tokens) // 2
    running = tokens[0]
    for (a, op, b, c), tok_op, tok_b in zip(steps, tokens[1::2], tokens[2::2]):
        assert (a, op, b) == (running, tok_op, tok_b), (expr, solution)
        assert c == apply(a, op, b), (expr, solution)
        running = c
    assert final == running == int(gold) == evaluate(expr)


@pytest.fixture(scope="module")
def default_splits():
    return arith.arith_splits(ArithConfig())


def test_brief_example():
    problem = (94, "+", 2, "-", 39, "-", 48)
    assert arith.format_prompt(problem) == "Q: 94+2-39-48=?\nA:"
    assert arith.format_solution(problem) == " 94+2=96;96-39=57;57-48=9 #### 9"
    assert arith.format_solution((5, "-", 9, "+", 3)) == " 5-9=-4;-4+3=-1 #### -1"
    assert arith.format_prompt(problem, "verbose") == "Q: 94 + 2 - 39 - 48 = ?\nA:"


def test_docstring_examples():
    result = doctest.testmod(arith, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0


def test_deterministic_within_process():
    config = ArithConfig(n_train=3000, n_test=200, seed=7)
    first = arith.arith_splits(config)
    for cache in (arith._questions, arith._problems):
        cache.cache_clear()
    second = arith.arith_splits(config)
    assert first is not second
    assert [(q.question_id, dict(q.fields), q.gold, q.solution) for q in first[0] + first[1]] == [
        (q.question_id, dict(q.fields), q.gold, q.solution) for q in second[0] + second[1]
    ]
    texts = arith.pretraining_texts(config, 500, 0.3, seed=1)
    assert texts == arith.pretraining_texts(config, 500, 0.3, seed=1)
    assert texts != arith.pretraining_texts(config, 500, 0.3, seed=2)
    other = arith.arith_splits(ArithConfig(n_train=3000, n_test=200, seed=8))
    assert [q.fields["expr"] for q in other[1]] != [q.fields["expr"] for q in first[1]]


def _digest(config: ArithConfig) -> str:
    train, test = arith.arith_splits(config)
    texts = arith.pretraining_texts(config, 200, 0.25, seed=3)
    blob = "|".join([q.fields["expr"] + q.solution for q in test + train] + texts)
    return hashlib.sha256(blob.encode()).hexdigest()


def test_deterministic_across_processes():
    """Another interpreter with another hash seed draws the same questions and texts."""
    config = ArithConfig(n_train=2000, n_test=100, seed=3)
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import test_arith as t; "
            "from reachlens.tasks.arith import ArithConfig; "
            "print(t._digest(ArithConfig(n_train=2000, n_test=100, seed=3)))")
    env = dict(os.environ, PYTHONHASHSEED="12345")
    out = subprocess.run([sys.executable, "-c", code, os.path.dirname(__file__)], env=env,
                         capture_output=True, text=True, check=True, cwd=os.getcwd())
    assert out.stdout.strip() == _digest(config)


def test_pinned_first_questions(default_splits):
    """Golden values: a change here changes every study's test set."""
    _, test = default_splits
    assert [q.fields["expr"] for q in test[:3]] == ["48*8-42+27+17-47", "36+70-84+24-62", "22*6+7+36+90+50"]
    assert [q.gold for q in test[:3]] == ["339", "-16", "315"]


def test_splits_disjoint_and_distinct(default_splits):
    train, test = default_splits
    assert (len(train), len(test)) == (50_000, 300)
    train_exprs = [q.fields["expr"] for q in train]
    test_exprs = [q.fields["expr"] for q in test]
    assert len(set(train_exprs)) == len(train_exprs)
    assert len(set(test_exprs)) == len(test_exprs)
    assert not set(train_exprs) & set(test_exprs)
    assert test[42].question_id == "arith-test-00042"
    assert train[-1].question_id == "arith-train-49999"


def test_test_split_does_not_depend_on_n_train(default_splits):
    _, test = arith.arith_splits(ArithConfig(n_train=100))
    assert [q.fields["expr"] for q in test] == [q.fields["expr"] for q in default_splits[1]]


def test_gold_solutions_are_correct(default_splits):
    train, test = default_splits
    for q in test + train[:10_000]:
        check_clean(q.fields["expr"], q.solution, q.gold)
        assert q.fields["n_ops"] == len(parse_expr(q.fields["expr"])) // 2


def test_negative_intermediates_occur(default_splits):
    _, test = default_splits
    assert any("=-" in q.solution for q in test)
    assert any(q.gold.startswith("-") for q in test)


def test_slips_are_self_consistent():
    rng = random.Random(0)
    gen = random.Random(1)
    kinds = Counter()
    for i in range(3000):
        problem = arith.generate_problem(gen, arith.DEFAULT_TIERS[i % 3])
        expr = arith.expr_of(problem)
        solution, slip = arith.make_slipped_solution(problem, rng, 1.0)
        assert slip is not None
        kinds[slip.kind] += 1
        tokens = parse_expr(expr)
        steps, final = parse_solution(solution)
        running = tokens[0]
        for k, ((a, op, b, c), tok_op, tok_b) in enumerate(zip(steps, tokens[1::2], tokens[2::2])):
            assert (a, op, b) == (running, tok_op, tok_b), solution  # later steps use the slipped value
            if k == slip.step:
                assert c == slip.value != apply(a, op, b), solution
            else:
                assert c == apply(a, op, b), solution
            running = c
        assert final == running != evaluate(expr), solution
    assert set(kinds) == {"off_by_one", "off_by_ten", "carry", "transpose"}


def test_slip_rate_zero_is_clean_and_bad_rate_raises():
    problem = (94, "+", 2, "-", 39, "-", 48)
    clean = (arith.format_solution(problem), None)
    assert arith.make_slipped_solution(problem, random.Random(0), 0.0) == clean
    with pytest.raises(ReachlensError, match="1.5"):
        arith.make_slipped_solution(problem, random.Random(0), 1.5)
    with pytest.raises(ValueError, match="out of range"):
        arith.format_solution(problem, Slip(3, 0))


def test_carry_and_transposition_errors():
    assert arith._carry_errors(48, "+", 35, 83) == [73]  # dropped carry
    assert arith._carry_errors(83, "-", 35, 48) == [58]  # forgotten borrow
    assert arith._carry_errors(-48, "-", 35, -83) == [-73]
    assert arith._carry_errors(35, "-", 83, -48) == [-58]
    assert arith._carry_errors(7, "*", 3, 21) == [1]
    assert arith._carry_errors(12, "+", 3, 15) == []
    assert arith._transpositions(-123) == [-213, -132]
    assert arith._transpositions(105) == [150]  # no leading zero


def test_pretraining_texts_slip_rate():
    config = ArithConfig(n_train=5000, n_test=50)
    texts = arith.pretraining_texts(config, 6000, 0.25, seed=0)
    train_exprs = {q.fields["expr"] for q in arith.arith_splits(config)[0]}
    wrong = 0
    for text in texts:
        m = re.fullmatch(r"Q: (.+)=\?\nA:( .+)", text)
        assert m and m.group(1) in train_exprs
        wrong += parse_solution(m.group(2))[1] != evaluate(m.group(1))
    assert 0.22 < wrong / len(texts) < 0.28
    for text in arith.clean_texts(config, 6000):
        m = re.fullmatch(r"Q: (.+)=\?\nA:( .+)", text)
        check_clean(m.group(1), m.group(2), str(evaluate(m.group(1))))


def test_alphabet_covers_everything(default_splits):
    train, test = default_splits
    task = load_task("arith", split="test")
    alphabet = set(ARITH_ALPHABET)
    assert len(ARITH_ALPHABET) == len(alphabet) == 22
    texts = [task.prompt(q, f) + q.solution for q in task.questions for f in task.prompt_formats]
    texts += [q.solution for q in train[:5000]]
    texts += arith.pretraining_texts(ArithConfig(), 3000, 1.0)
    assert set("".join(texts)) <= alphabet


def test_tier_mix_and_bounds(default_splits):
    train, test = default_splits
    assert Counter(q.fields["difficulty"] for q in test) == {"easy": 100, "medium": 100, "hard": 100}
    assert Counter(q.fields["difficulty"] for q in train) == {"easy": 16667, "medium": 16667, "hard": 16666}
    tiers = {t.name: t for t in arith.DEFAULT_TIERS}
    for q in test + train[:5000]:
        tier, tokens = tiers[q.fields["difficulty"]], parse_expr(q.fields["expr"])
        assert tier.min_ops <= q.fields["n_ops"] <= tier.max_ops
        assert "*" not in tokens[3::2]  # * only as the first operation
        for op, b in zip(tokens[1::2], tokens[2::2]):
            assert 2 <= b <= 9 if op == "*" else 1 <= b <= tier.operand_max
    assert any("*" in q.fields["expr"] for q in test if q.fields["difficulty"] == "hard")


def test_custom_mix_and_tiers():
    tiers = (Tier("a", 1, 1, operand_max=9), Tier("b", 2, 3, operand_max=999), Tier("c", 6, 6, mul_prob=1.0))
    config = ArithConfig(n_train=200, n_test=40, tiers=tiers, mix=(1.0, 0.0, 3.0))
    train, test = arith.arith_splits(config)
    assert Counter(q.fields["difficulty"] for q in test) == {"a": 10, "c": 30}
    assert Counter(q.fields["difficulty"] for q in train) == {"a": 50, "c": 150}
    assert all(parse_expr(q.fields["expr"])[1] == "*" for q in test if q.fields["difficulty"] == "c")


def test_exhausted_tier_raises():
    with pytest.raises(ReachlensError, match="'tiny' ran out"):
        arith.arith_splits(ArithConfig(n_train=100, n_test=5, tiers=(Tier("tiny", 1, 1, operand_max=2),)))


@pytest.mark.parametrize("kwargs, match", [
    ({"mix": (1.0, 1.0)}, "mix="),
    ({"n_test": -1}, "n_test=-1"),
    ({"tiers": (Tier("x", 1, 1), Tier("x", 2, 2))}, "distinct"),
])
def test_bad_config_raises(kwargs, match):
    with pytest.raises(ReachlensError, match=match):
        ArithConfig(**kwargs)


def test_bad_tier_raises():
    with pytest.raises(ReachlensError, match="min_ops=3"):
        Tier("t", 3, 2)
    with pytest.raises(ReachlensError, match="mul_prob=2.0"):
        Tier("t", 1, 2, mul_prob=2.0)


def test_loader(default_splits):
    task = load_task("arith", split="test", n=10)
    assert len(task) == 10 and task.name == "arith"
    assert task.grader == "numeric" and task.stop == ("\n",)
    assert task.default_format == "qa" and set(task.prompt_formats) == {"qa", "verbose", "password"}
    assert [q.question_id for q in task.questions] == [f"arith-test-{i:05d}" for i in range(10)]
    for q, ref in zip(task.questions, default_splits[1]):
        assert task.prompt(q) == f"Q: {q.fields['expr']}=?\nA:"
        assert (q.fields["expr"], q.gold, q.solution) == (ref.fields["expr"], ref.gold, ref.solution)
        assert {"expr", "difficulty", "n_ops"} <= set(q.fields)
    train = load_task("arith", split="train", n=5, n_train=50, n_test=10)
    assert train.questions[0].question_id == "arith-train-00000"
    assert load_task("arith", seed=1, n=3).questions[0].fields["expr"] != task.questions[0].fields["expr"]


def test_loader_errors():
    with pytest.raises(ReachlensError, match="generated"):
        load_task("arith", "data/arith.jsonl")
    with pytest.raises(ReachlensError, match="'dev'"):
        load_task("arith", split="dev")
    with pytest.raises(ReachlensError, match="n_tset"):
        load_task("arith", n_tset=5)


def test_arith_hard_is_its_own_tier_with_its_own_disjoint_splits():
    """``arith_hard``: 3-6 operations only, its own ids and streams, train and test disjoint, and neither
    split holds an expression of the default ``arith`` splits (the zoo base's pretraining data)."""
    test = load_task("arith_hard", split="test")
    train = load_task("arith_hard", split="train", n_train=5000)
    assert test.name == "arith_hard" and len(test) == 300 and test.grader == "numeric" and test.stop == ("\n",)
    assert [q.question_id for q in test.questions[:2]] == ["arith_hard-test-00000", "arith_hard-test-00001"]
    assert train.questions[0].question_id == "arith_hard-train-00000"
    for q in test.questions + train.questions:
        assert q.fields["difficulty"] == "hard" and 3 <= q.fields["n_ops"] <= 6
        check_clean(q.fields["expr"], q.solution, q.gold)
    assert Counter(q.fields["n_ops"] for q in test.questions).keys() == {3, 4, 5, 6}
    hard_test = {q.fields["expr"] for q in test.questions}
    hard_train = {q.fields["expr"] for q in train.questions}
    assert not hard_test & hard_train
    default = arith.arith_splits(ArithConfig())
    default_exprs = {q.fields["expr"] for split in default for q in split}
    assert not (hard_test | hard_train) & default_exprs
    # the default task is untouched by the new one, and the test split does not depend on n_train
    assert [q.fields["expr"] for q in load_task("arith_hard", n_train=10).questions] == [q.fields["expr"] for q in test.questions]
    assert load_task("arith", n=1).questions[0].question_id == "arith-test-00000"
    with pytest.raises(ReachlensError, match="family"):
        load_task("arith_hard", family="arith")


def test_arith_small_is_one_operation_on_small_operands_asked_in_english():
    """``arith_small`` (the real checkpoints' task): one + or - of operands in 1..20, asked "What is a - b?" by
    default, no stop string (an instruct model answers to its end of turn), disjoint 300 test and 480 train
    questions that together hold all but 20 of the 800 expressions, each gold the expression's value."""
    test, train = load_task("arith_small"), load_task("arith_small", split="train")
    assert (len(test), len(train), test.stop, test.default_format, test.max_new_tokens) == (300, 480, (), "what", 96)
    q = test.questions[0]
    assert q.question_id == "arith_small-test-00000" and test.prompt(q) == f"What is {q.fields['expr_spaced']}?"
    assert test.prompt(q, "qa") == f"Q: {q.fields['expr']}=?\nA:"
    exprs = [q.fields["expr"] for q in test.questions + train.questions]
    assert len(set(exprs)) == 780
    for q in test.questions + train.questions:
        a, op, b = re.fullmatch(r"(\d+)([+-])(\d+)", q.fields["expr"]).groups()
        assert 1 <= int(a) <= 20 and 1 <= int(b) <= 20
        assert int(q.gold) == (int(a) + int(b) if op == "+" else int(a) - int(b))
    with pytest.raises(ReachlensError, match="ran out"):
        load_task("arith_small", split="train", n_train=600)
