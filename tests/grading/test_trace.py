"""Trace graders on hand-written completions (valid chains, compensating slips, skipped operands, hostile text) and
their agreement with recomputations written independently here (int arithmetic on split steps; Python's ast on
GSM8K's trusted gold annotations)."""

from __future__ import annotations

import ast
import operator
import random
import re
import time
from fractions import Fraction

import pytest
from grading_shared_data import read_jsonl

from reachlens.grading.trace import arith_chain, get_trace_grader, trace_grader_for_task
from reachlens.tasks.arith import ArithConfig, HARD_TIERS, arith_splits, draw_slip, format_solution, solve
from reachlens.tasks.arith_mc import parse_expr

ARITH = get_trace_grader("arith_trace")
GSM = get_trace_grader("gsm8k_trace")
EXPR = "94+2-39-48"  # 94+2=96;96-39=57;57-48=9


@pytest.mark.parametrize("text, correct, valid, first", [
    (" 94+2=96;96-39=57;57-48=9 #### 9", True, True, -1),  # the zoo's format
    (" 94 + 2 = 96 ; 96 - 39 = 57 ; 57 - 48 = 9 #### 9", True, True, -1),  # spaces around every symbol
    (" 94+2=96 96-39=57 57-48=9 #### 9", True, True, -1),  # no separator
    (" 94+2=96;94+2=96;96-39=57;57-48=9 #### 9", True, True, -1),  # a step written twice in a row counts once
    (" 94+2=96;96-39=58;58-48=9 #### 9", True, False, 1),  # compensating slips: 58, then 58-48 written 9
    (" 94+2=96;96-87=9 #### 9", True, False, 1),  # a skipped operand (39 and 48 merged), right answer
    (" 94+2-39=57;57-48=9 #### 9", True, False, 0),  # two operations in one step
    (" 94+2=96;95-39=56;56-48=8 #### 8", False, False, 1),  # the chain does not follow the running value
    (" #### 9", True, False, -1),  # a right answer with no steps
    (" 9", True, False, -1),
    (" 94+2=96;96-39=57 #### 9", True, False, -1),  # a step missing at the end
    (" 94+2=96;96-39=57;57-48=9;9-1=8 #### 9", True, False, 3),  # more steps than operations
    (" 94+2=96;96-39=57;57-48=9 #### 8", False, False, -1),  # valid steps, another final answer
    (" 2+94=96;96-39=57;57-48=9 #### 9", True, False, 0),  # operands swapped: not the expression's order
    (" 94+2=96;96-39=57;57-48==9 #### 9", True, False, 2),  # a malformed step
])
def test_arith_trace_verdicts(text, correct, valid, first):
    g = ARITH.grade(text, "9", expr=EXPR)
    assert (g.correct, g.valid, g.first_invalid) == (correct, valid, first), g.reason
    assert g.solved == (correct and valid)
    assert g.checkable == (g.n_steps > 0)
    assert not g.valid or g.reason == ""


def test_the_issue_example_and_negative_running_values():
    g = ARITH.grade(" 89-91=-2;-2-64=-66;-66+87=20;20+21=42 #### 42", "42", expr="89-91-64+87+21")
    assert (g.correct, g.valid, g.first_invalid, g.reason) == (True, False, 2, "step 3: -66+87 is 21, written 20")
    g = ARITH.grade(" 89-91=-2;-2-64=-66;-66+87=21;21+21=42 #### 42", "42", expr="89-91-64+87+21")
    assert g.solved
    assert ARITH.grade(" 7*3=21;21+5=26 #### 26", "26", expr="7*3+5").solved
    assert ARITH.grade(" 7\u00d73=21;21\u22125=16 #### 16", "16", expr="7*3-5").solved  # × and the minus sign


@pytest.mark.parametrize("text, valid, checkable", [
    ("12 - 5 = 7. The answer is 7.", True, True),
    ("To find 12 - 5, subtract: 12 \u2212 5 = 7.\nSo the answer is **7**.", True, True),
    ("12 minus 5 equals 7. The answer is 7.", False, False),  # no checkable step: never valid
    ("12 - 5 equals 7.", True, True),  # SmolLM2-135M-Instruct's sentences: an equality said in words
    ("So, 12 - 5 is 7.", True, True),
    ("12 - 5 is equal to 7. The answer is 7.", True, True),
    ("12 - 5 is 8, so 7.", False, True),
    ("The answer is 7.", False, False),
    ("12 - 5 = 8, so the answer is 7.", False, True),
    ("12 + 5 = 17. The answer is 7.", False, True),
])
def test_arith_small_sentences(text, valid, checkable):
    g = ARITH.grade(text, "7", expr="12-5")
    assert (g.valid, g.checkable, g.correct) == (valid, checkable, True), g.reason


@pytest.mark.parametrize("text", [
    "9" * 100_000 + "+1=1 #### 9",  # a huge number
    "9" * 15_000 + "+1=1 #### 9",  # a huge number, under the length bound
    "(" * 50_000 + "94+2" + ")" * 50_000 + "=96 #### 9",  # deep nesting
    "(" * 9_000 + "94+2" + ")" * 9_000 + "=96 #### 9",  # deep nesting, under the length bound
    "=" * 1_000_000,  # a million equal signs
    "1=" * 900 + "1",  # many equal signs, under the bounds
    "94+2=96;" * 2400 + " #### 9",  # many steps
    "1+" * 9_000 + "1=2 #### 9",  # one huge side
    "94+2=" + "9" * 10_000 + ";96-39=57;57-48=9 #### 9",  # a huge result
])
@pytest.mark.parametrize("grader", [ARITH, GSM])
def test_hostile_text_is_bounded_and_never_valid(text, grader):
    start = time.process_time()
    g = grader.grade(text, "9", expr=EXPR)
    assert time.process_time() - start < 2.0
    assert not g.valid and g.reason


def test_a_broken_expression_is_a_grader_error_never_valid():
    g = ARITH.grade(" 94+2=96 #### 96", "96", expr=None)
    assert not g.valid and not g.checkable and g.reason == "grader error"


@pytest.mark.parametrize("text, valid, checkable", [
    ("She sold 48/2 = <<48/2=24>>24 clips.\nAltogether 48+24 = <<48+24=72>>72.\n#### 72", True, True),
    ("She sold 48/2 = <<48/2=24>>24 clips.\nAltogether 48+24 = <<48+24=73>>73.\n#### 73", False, True),
    ("She sold 24 clips in May and 72 in all.\n#### 72", False, False),  # no checkable step: never valid
    ("Each costs (5 + 3) * 2 = 16 dollars, so 16 * 3 = 48.\n#### 48", True, True),
    ("A third is 10/3 = 3.33 cups.", True, True),  # a result rounded to the decimals written
    ("A third is 10/3 = 3.4 cups.", False, True),
    ("It is 5/0 = 1.", False, True),  # a division by zero is no value
    ("Total = 7 apples", False, False),  # words on the left: no equation
    ("She ate <<3/4=3/4>>3/4 of it.", True, True),  # a fraction as the result
    ("It is 5 = 5 = 5.", False, False),  # restatements compute nothing: no checkable step
])
def test_gsm8k_trace_verdicts(text, valid, checkable):
    g = GSM.grade(text, "72")
    assert (g.valid, g.checkable) == (valid, checkable), g.reason


def test_gsm8k_trace_reads_no_equality_said_in_words():
    """Decided (issue 56): gsm8k_trace reads "=" and the annotations only, not "equals"/"is" (arith_trace does). The
    two GSM8K test solutions of 1,319 with "a op b is/equals c" in words say a proportion ("2/5 is equal to 12.8
    hectares") and a product half in words ("8 times 1/2 equals 4"): read as equations, both right solutions would
    be invalid. So a claim in words is no checkable step, right or wrong, and the annotations still decide."""
    ruther = ("Mr. Ruther is left with 1 - 3/5 = 2/5 of his land.\nSince 2/5 is equal to 12.8 hectares, then 1/5 is "
              "equal to 12.8/2 = <<12.8/2=6.4>>6.4 hectares.\nHence, Mr. Ruther had 6.4 x 5 = <<6.4*5=32>>32 "
              "hectares of land at first.\n#### 32")
    cubes = ("The giant cubes used up 12 ounces of water because 3 times 4 equals <<3*4=12>>12.\nThe small cubes "
             "used up 4 ounces of water because 8 times 1/2 equals 4.\n#### 16")
    for text in (ruther, cubes):
        assert GSM.grade(text, "0").valid
    for said in ("So 48 / 2 is 24.", "So 48 / 2 is 25.", "48 / 2 equals 25."):
        assert not GSM.grade(said, "24").checkable  # in words: neither a right nor a wrong step
    assert ARITH.grade("48 - 2 is 46.", "46", expr="48-2").solved  # arith_trace reads them (its own test above)


def test_every_task_with_steps_names_its_trace_grader():
    assert {t: trace_grader_for_task(t) for t in ("arith", "arith_hard", "arith_mc", "arith_small", "gsm8k")} == {
        "arith": "arith_trace", "arith_hard": "arith_trace", "arith_mc": "arith_trace", "arith_small": "arith_trace",
        "gsm8k": "gsm8k_trace"}
    assert trace_grader_for_task("piqa") is None
    for expr in ("94+2-39-48", "7*3+5", "5-9+3"):
        steps, answer = solve(parse_expr(expr))
        assert [(int(a), op, int(b), int(c)) for a, op, b, c in arith_chain(expr)] == steps


# --- agreement with an independent recomputation -----------------------------------------------------------------

_STEP = re.compile(r"^(-?\d+)([-+*])(\d+)=(-?\d+)$")


def independent_arith_valid(text: str, expr: str) -> bool:
    """The zoo format checked another way: split on ';', each step by one regex, int arithmetic, the expected steps
    from reachlens.tasks.arith.solve; consecutive duplicates collapsed; the final answer after '####'."""
    if "####" not in text:
        return False
    body, final = text.split("####", 1)
    written = [s.replace(" ", "") for s in body.strip().split(";") if s.strip()]
    steps = []
    for s in written:
        m = _STEP.match(s)
        if m is None:
            return False
        step = (int(m[1]), m[2], int(m[3]), int(m[4]))
        if not steps or steps[-1] != step:
            steps.append(step)
    truth, answer = solve(parse_expr(expr))
    try:
        return steps == [tuple(t) for t in truth] and int(final.split()[0]) == answer
    except (ValueError, IndexError):
        return False


def _variants(expr: str, rng: random.Random) -> list[str]:
    problem = parse_expr(expr)
    gold = format_solution(problem)
    body, final = gold.split(" #### ")
    steps = body.strip().split(";")
    out = [gold, format_solution(problem, draw_slip(problem, rng))]
    i = rng.randrange(len(steps))
    out.append(" " + ";".join(steps[:i] + steps[i + 1:]) + " #### " + final)  # a step dropped
    chars = list(gold)
    digits = [j for j, c in enumerate(chars) if c.isdigit()]
    j = rng.choice(digits)
    chars[j] = str((int(chars[j]) + rng.randint(1, 9)) % 10)  # one digit changed anywhere
    out.append("".join(chars))
    a, op, b, c = solve(problem)[0][0]  # a compensating pair: the first result off by one, the next step back on
    if len(steps) > 1:
        s0 = f"{a}{op}{b}={c + 1}"
        out.append(" " + ";".join([s0, *steps[1:]]) + " #### " + final)
    return out


def test_arith_trace_agrees_with_an_independent_recomputation():
    rng = random.Random(0)
    train, _ = arith_splits(ArithConfig(n_train=300, n_test=0, tiers=HARD_TIERS, family="arith_hard"))
    n, agree, valid = 0, 0, 0
    for q in train:
        for text in _variants(q.fields["expr"], rng):
            mine = ARITH.grade(text, q.gold, expr=q.fields["expr"]).valid
            theirs = independent_arith_valid(text, q.fields["expr"])
            n, agree, valid = n + 1, agree + (mine == theirs), valid + theirs
            assert mine == theirs, (text, q.fields["expr"])
    assert n >= 1200 and agree == n and 300 <= valid < n  # the gold solutions and unharmed variants are valid


_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


def _ast_value(node):
    """The exact value of a trusted gold annotation's left side, by Python's own parser (never on model text)."""
    if isinstance(node, ast.Expression):
        return _ast_value(node.body)
    if isinstance(node, ast.Constant):
        return Fraction(str(node.value))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_ast_value(node.operand)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_ast_value(node.left), _ast_value(node.right))
    raise ValueError(ast.dump(node))


def test_gsm8k_trace_agrees_with_python_on_the_gold_annotations():
    """Every gold solution's annotations recomputed by Python's ast (rounded as written) against gsm8k_trace; a
    solution whose annotations all restate a value has no checkable step."""
    rows = read_jsonl("gsm8k/test.jsonl")
    checked = agree = 0
    for row in rows:
        notes = re.findall(r"<<([^=<>]+)=([^<>]+)>>", row["answer"])
        if not notes or any(re.search(r"[^0-9.+\-*/() ]", lhs) for lhs, _ in notes):
            continue
        theirs = True
        for lhs, rhs in notes:
            try:
                value, written = _ast_value(ast.parse(lhs.strip(), mode="eval")), Fraction(rhs.strip())
            except (ValueError, ZeroDivisionError, SyntaxError):
                theirs = None
                break
            places = len(rhs.strip().split(".")[1]) if "." in rhs else 0
            theirs &= value == written or (places > 0 and abs(value - written) * 10 ** places * 2 <= 1)
        if theirs is None:
            continue
        if not any(re.search(r"[-+*/]", lhs.strip().lstrip("-")) for lhs, _ in notes):
            theirs = False  # "<<5=5>>" restates, it computes nothing: no checkable step, never valid
        text = "\n".join(f"<<{lhs}={rhs}>>" for lhs, rhs in notes)
        checked += 1
        agree += GSM.grade(text, "0").valid == theirs
    assert checked > 1000 and agree == checked
