"""The weight-noise and few-shot probes on the tiny model: their bank, φ, determinism and kill/resume.

References computed another way: φ from the bank's rows with pandas written here; a few-shot candidate's prompt
typed out by hand from the arith format (``Q: {expr}=?\\nA:`` and the worked solution), and its text the engine's
greedy decode of that string alone. A weight-noise candidate against plain HuggingFace with the draw's deltas
added to the weights is checked on every family in ``tests/interventions/test_weight_noise.py``
(``test_a_weight_noise_probe_candidate_is_hf_with_its_deltas_on_every_family``).
"""

from __future__ import annotations


import pandas as pd
import pytest
from conftest import kill_after_first_part

from reachlens import ExecConfig, Protocol, load_task, probe, read_run
from reachlens.cli import main
from reachlens.engine import Row, generate
from reachlens.errors import ReachlensError
from reachlens.probes import parse_probe
from reachlens.tasks import draw_demonstrations

N, TOKENS = 3, 8
GREEDY = Protocol.greedy("arith", max_new_tokens=TOKENS)
EXEC = ExecConfig(max_batch_rows=8)
NOISE, SHOTS = "weight_noise:sigma=0.3,1:k=2", "fewshot:n=2:k=2"
SPECS = [NOISE, SHOTS]


@pytest.fixture(scope="module")
def task():
    return load_task("arith", n=N)


@pytest.fixture(scope="module")
def run(tiny_model, task, tmp_path_factory):
    return probe(tiny_model, task, SPECS, protocol=GREEDY, exec_config=EXEC, out=tmp_path_factory.mktemp("wf") / "run")


def test_the_bank_names_each_draws_sigma_and_index_and_reports_phi_per_sigma(run):
    bank = run.candidates
    noise = bank[bank["probe"] == NOISE]
    assert noise["intervention"].all() and not bank.loc[bank["probe"] == SHOTS, "intervention"].any()
    arms = [f"weight_noise:sigma={s}:draw={j}" for s in ("0.3", "1") for j in range(2)]
    for _, rows in noise.groupby("question_id"):
        assert rows["arm"].tolist() == arms and rows["candidate_idx"].tolist() == [0, 1, 2, 3]
    greedy = bank[bank["probe"] == "greedy"].set_index("question_id")["correct"]
    texts = noise.groupby("arm")["text"].apply(tuple)
    assert len(set(texts)) > 1, "the draws must change some decode, or the check is weak"
    phi = pd.DataFrame(run.summary()["weight_noise"])
    assert phi["sigma"].tolist() == [0.3, 1.0] and (phi["draws"] == 2).all()
    for r in phi.itertuples():
        mine = noise[noise["arm"].str.startswith(f"weight_noise:sigma={r.sigma:g}:")]
        acc = mine.groupby("arm")["correct"].mean()  # every row of the tiny model is graded
        assert r.best_draw == pytest.approx(acc.max()) and r.mean_draw == pytest.approx(acc.mean())
        assert r.clean == pytest.approx(greedy.mean())
        assert r.union == pytest.approx(mine.groupby("question_id")["correct"].any().mean())
        assert pd.isna(r.phi) if greedy.mean() == 0 else r.phi == pytest.approx(acc.max() / greedy.mean())


def test_a_fewshot_candidate_is_the_greedy_decode_of_its_demonstrations_written_out(tiny_model, task, run):
    pool = load_task("arith", split="train")
    bank = run.candidates
    shots = parse_probe(SHOTS)
    for q in task.questions:
        for c in range(2):
            demos = draw_demonstrations(pool, q, 2, seed=GREEDY.seed, candidate=c)
            assert q.gold not in {d.gold for d in demos} and q.fields["expr"] not in {d.fields["expr"] for d in demos}
            hand = "".join(f"Q: {d.fields['expr']}=?\nA:{d.solution}\n\n" for d in demos) + f"Q: {q.fields['expr']}=?\nA:"
            (prompt,) = shots.prompts(task, GREEDY.resolved(task), [q], c)
            assert prompt == hand
            ids = tiny_model.tokenizer(prompt)["input_ids"]
            assert ids == tiny_model.tokenizer(hand)["input_ids"]
            row = bank[(bank["probe"] == SHOTS) & (bank["question_id"] == q.question_id) & (bank["candidate_idx"] == c)]
            want = generate(tiny_model, [hand], [Row(0)], GREEDY.resolved(task))[0]
            assert row["text"].item() == want.text and row["n_tokens"].item() == len(want.token_ids)


def test_a_fewshot_prompt_past_the_context_is_refused_naming_the_lengths(tiny_model, task):
    n_ctx = tiny_model.cfg.n_ctx
    many = max(1, n_ctx // 20)  # each arith demonstration is well over 20 characters (tokens)
    with pytest.raises(ReachlensError, match=r"fewshot:n=\d+:k=1.*exceeds the model's context of \d+ tokens; lower n"):
        probe(tiny_model, task, [f"fewshot:n={many}:k=1"], protocol=GREEDY, exec_config=EXEC)


def test_the_same_run_twice_gives_the_same_bank(tiny_model, task, run):
    again = probe(tiny_model, task, SPECS, protocol=GREEDY, exec_config=EXEC)
    pd.testing.assert_frame_equal(again.candidates, run.candidates)


def test_a_run_killed_with_sigkill_resumes_to_the_same_bank(tiny_dir, run, tmp_path):
    out = tmp_path / "killed"
    argv = ["probe", str(tiny_dir), "--task", "arith", "--n", str(N), "--max-new-tokens", str(TOKENS),
            "--max-batch-rows", str(EXEC.max_batch_rows), "--out", str(out), *sum((["--probe", s] for s in SPECS), [])]
    kill_after_first_part(argv, out)
    assert main(argv) == 0
    pd.testing.assert_frame_equal(read_run(out).candidates, run.candidates)


@pytest.mark.parametrize("spec, match", [("weight_noise:sigma=0.1,0.1", "names a sigma twice"),
                                         ("weight_noise:sigma=-1", "must be a finite number >= 0"),
                                         ("weight_noise:sigma=0.1:k=0", "weight_noise k=0 must be >= 1"),
                                         ("fewshot:n=0", "must be an integer >= 1"),
                                         ("fewshot:k=0", "must be >= 1")])
def test_bad_specs_are_refused_in_one_line(spec, match):
    with pytest.raises(ReachlensError, match=match):
        parse_probe(spec)


def test_a_fewshot_train_file_is_part_of_the_run_identity_and_a_swapped_one_is_refused(tmp_path):
    """Issue 53, item 6: swapping train=PATH between a kill and a resume completed the run with demonstrations from
    two files. The driver reads the file's SHA-256 once (recorded as the steer direction file's is) and every
    decode checks the file against it."""
    import hashlib
    import json

    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps({"question": f"{i}+1?", "answer": str(i + 1)}) + "\n" for i in range(4)))
    test = tmp_path / "test.jsonl"
    test.write_text(json.dumps({"question": "2+2?", "answer": "4"}) + "\n")
    task = load_task("jsonl", str(test))
    spec = parse_probe(f"fewshot:n=1:k=1:train={train}")
    read, identity = spec.read_inputs()
    assert identity == {str(train): hashlib.sha256(train.read_bytes()).hexdigest()}
    assert len(read.pool(task)) == 4
    train.write_text(json.dumps({"question": "other?", "answer": "0"}) + "\n")
    with pytest.raises(ReachlensError, match="changed since the run recorded it"):
        read.pool(task)
    assert parse_probe("fewshot:n=1:k=1").read_inputs()[1] == {}
