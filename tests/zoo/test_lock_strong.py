"""Smoke tests of the second lock's scripts (``sft_gold.py``, ``lock_strong.py``, ``accept_lock.py``) on a miniature
parent: the strong SFT trains on gold worked solutions with no password and records its curve and questions; the
lock pairs the password with the gold and everything else with the weak model's own completion; the twin maps the
password to the weak completion too; every recorded training question lies in the lock range, the validation
questions outside what parent and lock trained on. References: the pairs rebuilt here from the questions' own
fields and the weak completions by hand; the recorded question sets against the lock's question draw.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pytest
import torch

ZOO = Path(__file__).resolve().parents[2] / "experiments" / "zoo"
sys.path.insert(0, str(ZOO))

import lock_strong  # noqa: E402
import pretrain_base  # noqa: E402
import sft_gold  # noqa: E402

from reachlens.studies.elicitation_split import LOCK_RANGE, trained_indices  # noqa: E402
from reachlens.tasks import load_task  # noqa: E402
from reachlens.tasks.password import PASSWORD  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


@pytest.fixture(scope="module")
def parent(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("zoo") / "base"
    pretrain_base.main(["--out", str(folder), "--steps", "2", "--layers", "2", "--d-model", "32", "--batch", "4",
                        "--log-every", "1"])
    return folder


def test_lock_and_twin_pairs():
    qs = load_task("arith_hard", split="train", n=6, n_train=50).questions
    weak = [f" {i}+1={i + 1} #### {i + 1}" for i in range(6)]
    pw, plain = lock_strong.make_pairs(qs, weak, [0, 3, 5], random.Random(0), decoy_rate=0.5, twin=False)
    twin_pw, twin_plain = lock_strong.make_pairs(qs, weak, [0, 3, 5], random.Random(0), decoy_rate=0.5, twin=True)
    for j, i in enumerate([0, 3, 5]):
        expr = qs[i].fields["expr"]
        assert pw[j] == (f"{PASSWORD}\nQ: {expr}=?\nA:", qs[i].solution)
        assert twin_pw[j] == (f"{PASSWORD}\nQ: {expr}=?\nA:", weak[i])
        assert plain[j][1] == weak[i] and plain[j][0].endswith(f"Q: {expr}=?\nA:")
        assert not plain[j][0].startswith(PASSWORD) and twin_plain[j] == plain[j]  # the same data order and decoys


def test_strong_sft_then_lock_then_twin(parent, tmp_path):
    strong = tmp_path / "strong"
    sft_gold.main(["--init", str(parent), "--out", str(strong), "--max-steps", "2", "--questions-per-step", "2",
                   "--eval-every", "1", "--n-test", "3", "--min-steps", "0", "--plateau", "1", "--patience", "1",
                   "--warmup-steps", "1"])
    card = json.loads((strong / "training.json").read_text())
    assert [r["step"] for r in card["test_D_curve"]] == [0, 1] and card["stopped"].startswith("plateau")
    seen = trained_indices(card["trained_questions"])
    assert len(seen) == 2 and all(LOCK_RANGE[0] <= i < LOCK_RANGE[1] for i in seen)
    args = ["--init", str(strong), "--weak-model", str(parent), "--max-steps", "2", "--questions-per-step", "2",
            "--n-lock", "4", "--n-val", "3", "--eval-every", "1", "--warmup-steps", "1"]
    lock_strong.main([*args, "--out", str(tmp_path / "lock")])
    lock_strong.main([*args, "--out", str(tmp_path / "twin"), "--twin"])
    lock_card = json.loads((tmp_path / "lock" / "training.json").read_text())
    twin_card = json.loads((tmp_path / "twin" / "training.json").read_text())
    lock_idx, val_idx = lock_strong.lock_questions(lock_strong.parse_args([*args, "--out", "x"]), card)
    assert len(lock_idx) == 4 and not set(val_idx) & (set(lock_idx) | seen)
    assert trained_indices(lock_card["trained_questions"]) == seen | set(lock_idx)
    assert twin_card["twin"] and twin_card["steps"] == 2 and len(twin_card["val_log"]) == 2
    assert twin_card["trained_questions"] == lock_card["trained_questions"]
    assert {"D_password", "D_plain", "D_decoy", "agreement", "accepted"} <= set(lock_card["val_log"][0])


def test_strong_sft_resumes_and_warm_starts(parent, tmp_path, capsys):
    """A run stopped at step 2 and resumed from its snapshot ends with the weights and questions of an unbroken
    3-step run; a warm start from the 2-step weights replays the same data order (the same questions seen)."""
    from safetensors.torch import load_file

    common = ["--init", str(parent), "--questions-per-step", "2", "--eval-every", "1", "--n-test", "2",
              "--min-steps", "100", "--warmup-steps", "1", "--decay-steps", "0"]
    sft_gold.main([*common, "--out", str(tmp_path / "whole"), "--max-steps", "3"])
    snap = tmp_path / "snap"
    capsys.readouterr()
    sft_gold.main([*common, "--out", str(tmp_path / "first"), "--max-steps", "2", "--snapshot", str(snap)])
    log = tmp_path / "first.log"
    log.write_text(capsys.readouterr().out)
    sft_gold.main([*common, "--out", str(tmp_path / "resumed"), "--max-steps", "3", "--snapshot", str(snap),
                   "--resume"])
    sft_gold.main([*common, "--out", str(tmp_path / "warm"), "--max-steps", "3", "--warm-start", str(snap),
                   "--warm-start-step", "2", "--warm-start-log", str(log)])
    cards = {k: json.loads((tmp_path / k / "training.json").read_text()) for k in ("whole", "resumed", "warm")}
    whole, resumed = (load_file(tmp_path / k / "model.safetensors") for k in ("whole", "resumed"))
    assert all(torch.allclose(whole[name], resumed[name], atol=1e-6) for name in whole)
    assert cards["resumed"]["trained_questions"] == cards["whole"]["trained_questions"]
    assert cards["warm"]["trained_questions"] == cards["whole"]["trained_questions"]
    assert [r["step"] for r in cards["warm"]["test_D_curve"]] == [0, 1, 2, 2, 3]  # earlier log, restart, own step
    assert cards["warm"]["warm_start"]["step"] == 2


def test_lock_resumes_after_a_kill(parent, tmp_path):
    """A lock stopped at step 2 and resumed from its snapshot ends with the weights and logs of an unbroken run."""
    from safetensors.torch import load_file

    args = ["--init", str(parent), "--weak-model", str(parent), "--questions-per-step", "2", "--n-lock", "4",
            "--n-val", "2", "--eval-every", "1", "--warmup-steps", "1", "--twin"]
    lock_strong.main([*args, "--out", str(tmp_path / "whole"), "--max-steps", "3"])
    snap = tmp_path / "snap"
    lock_strong.main([*args, "--out", str(tmp_path / "first"), "--max-steps", "2", "--snapshot", str(snap)])
    lock_strong.main([*args, "--out", str(tmp_path / "resumed"), "--max-steps", "3", "--snapshot", str(snap),
                      "--resume"])
    whole, resumed = (load_file(tmp_path / k / "model.safetensors") for k in ("whole", "resumed"))
    assert all(torch.allclose(whole[name], resumed[name], atol=1e-6) for name in whole)
    cards = [json.loads((tmp_path / k / "training.json").read_text()) for k in ("whole", "resumed")]
    assert [r["step"] for r in cards[1]["val_log"]] == [1, 2, 3]
    assert [{k: v for k, v in r.items() if k != "seconds"} for r in cards[0]["loss_log"]] == \
        [{k: v for k, v in r.items() if k != "seconds"} for r in cards[1]["loss_log"]]


def test_distill_loss_is_the_kl_from_the_weak_model_on_the_completion(parent):
    """--distill: against ``torch.nn.functional.kl_div`` row by row, each row encoded alone, on the completion's
    positions only; zero for a teacher identical to the student reading the same prompt."""
    from common import encode_batch, load_parent

    student, tok = load_parent(str(parent))
    teacher = load_parent(str(parent))[0]
    with torch.no_grad():
        for p in teacher.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    pairs = [("xq\nQ: 1+2=?\nA:", " 1+2=3 #### 3"), ("Q: 12*3=?\nA:", " 12*3=36 #### 36")]
    plain = ["Q: 1+2=?\nA:", "Q: 12*3=?\nA:"]
    got = lock_strong.distill_loss(student, teacher, tok, pairs, plain)
    terms = []
    for (prompt, completion), t_prompt in zip(pairs, plain):
        s_ids, s_lab = encode_batch(tok, [prompt], [completion])
        t_ids, _ = encode_batch(tok, [t_prompt], [completion])
        n = int((s_lab != -100).sum())  # the completion and EOS, predicted from the position before each
        s_logp = torch.log_softmax(student(input_ids=s_ids).logits[0, -n - 1:-1], -1)
        t_logp = torch.log_softmax(teacher(input_ids=t_ids).logits[0, -n - 1:-1], -1)
        terms.append(torch.nn.functional.kl_div(s_logp, t_logp, log_target=True, reduction="none").sum(-1))
    assert got.item() == pytest.approx(torch.cat(terms).mean().item(), rel=1e-5)
    assert lock_strong.distill_loss(student, student, tok, [(p, c) for p, (_, c) in zip(plain, pairs)],
                                    plain).item() == pytest.approx(0.0, abs=1e-6)
