"""What a typo can allocate is bounded, and the bound is stated (issue 25, bounds and values).

Before issue 25 ``--k 100000000`` built all K+1 rows of a question before decoding anything (2.4 GB;
a larger K 14 GB) because ``--max-batch-rows`` was silently raised to K+1, and a 20 MB question was
tokenized for minutes before ``check_context`` refused it. Now a question's rows are decoded in
chunks of ``max_batch_rows``, a budget whose completions cannot fit the machine's memory is refused
naming the largest that fits, and a prompt longer in characters than the context can hold in any
tokens is refused before it is tokenized.
"""

from __future__ import annotations

import pytest

from reachlens import Protocol, audit, load_task
from reachlens.errors import ReachlensError
from reachlens.execution import ExecConfig
from reachlens.engine import memory
from reachlens.runner import context
from reachlens.runner import decode as auditing


def test_a_question_s_rows_are_decoded_in_chunks_of_max_batch_rows(tiny_model, monkeypatch) -> None:
    import importlib

    gen = importlib.import_module("reachlens.engine.generate")  # the package's `generate` is the function
    task, proto = load_task("arith", n=2), Protocol("arith", k=7, temperature=1.0, max_new_tokens=6)
    whole = audit(tiny_model, task, proto, exec_config=ExecConfig(max_batch_rows=16))
    sizes: list[int] = []
    real = gen._generate_chunk

    def spy(stack, ids, rows, *args, **kwargs):
        sizes.append(len(rows))
        return real(stack, ids, rows, *args, **kwargs)

    monkeypatch.setattr(gen, "_generate_chunk", spy)
    chunked = audit(tiny_model, task, proto, exec_config=ExecConfig(max_batch_rows=3))
    assert sizes and max(sizes) <= 3 and sum(sizes) == 2 * (7 + 1)
    # the same samples: each depends on (seed, question, j) alone, whatever its chunk
    assert chunked.samples["text"].tolist() == whole.samples["text"].tolist()
    assert chunked.questions["deployed_text"].tolist() == whole.questions["deployed_text"].tolist()


def test_a_budget_beyond_the_machine_is_refused_before_any_row_is_built(tiny_model, monkeypatch) -> None:
    def no_rows(*args, **kwargs):
        raise AssertionError("a row was built")

    monkeypatch.setattr(auditing, "Row", no_rows)
    task = load_task("arith", n=1)
    with pytest.raises(ReachlensError, match=r"k=1000000000000: .* use k <= \d+"):
        audit(tiny_model, task, Protocol("arith", k=10**12, temperature=1.0, max_new_tokens=4))
    monkeypatch.setattr(memory, "machine_memory", lambda: 1 << 30)  # a 1 GiB machine
    per_row = memory.ROW_BYTES + memory.ROW_BYTES_PER_TOKEN * 4
    k_max = (1 << 29) // per_row - 1
    with pytest.raises(ReachlensError, match=rf"k=1000000: .*1\.0 GiB.* use k <= {k_max}"):
        audit(tiny_model, task, Protocol("arith", k=10**6, temperature=1.0, max_new_tokens=4))
    with pytest.raises(ReachlensError, match=r"max_batch_rows=100000000: .* use max_batch_rows <= \d+"):
        audit(tiny_model, task, Protocol("arith", k=4, temperature=1.0, max_new_tokens=4), exec_config=ExecConfig(max_batch_rows=10**8))


def test_the_cli_refuses_a_huge_k_before_the_model_loads(capsys, tmp_path, monkeypatch) -> None:
    import reachlens.models
    from reachlens.cli import main

    monkeypatch.setattr(reachlens.models, "load_model", lambda *a, **k: pytest.fail("the model was loaded"))
    code = main(["audit", "zoo:base", "--task", "arith", "--n", "2", "--k", str(10**12), "--out", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert code == 2 and "k=1000000000000" in err and "Traceback" not in err
    assert not (tmp_path / "r").exists()


def test_a_prompt_too_long_for_the_context_is_refused_before_tokenizing(tiny_model, tmp_path, monkeypatch) -> None:
    import json

    n_ctx = tiny_model.cfg.n_ctx
    longest = max(len(t) for t in tiny_model.tokenizer.get_vocab())
    size = n_ctx * longest * context.CHARS_PER_TOKEN_MARGIN + 1
    data = tmp_path / "q.jsonl"
    data.write_text(json.dumps({"question": "1+1=?", "answer": "2"}) + "\n"
                    + json.dumps({"question": "9" * size, "answer": "9"}) + "\n")
    task = load_task("jsonl", str(data))
    seen: list[int] = []
    real = context.encode

    def spy(model, texts):
        seen.extend(len(t) for t in texts)
        return real(model, texts)

    monkeypatch.setattr(context, "encode", spy)
    with pytest.raises(ReachlensError, match=rf"prompt of [\d,]+ characters.*{n_ctx}-token context.*at most {longest}"):
        context.check_context(tiny_model, task, Protocol.greedy("jsonl", max_new_tokens=8).resolved(task))
    assert all(n < size for n in seen), "the long prompt was tokenized"
