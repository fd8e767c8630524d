"""The question page shows a chat prompt as the model saw it: the chat template's special tokens marked as tokens,
the question's own text as text (issue 58, item 2). The prompt of an audit recorded under ``prompt_format="chat"``
on a real instruct tokenizer (``../shared/tokenizers``, beside a tiny model of its vocabulary), against the tokenizer's own ``apply_chat_template``."""

from __future__ import annotations

import html
import re
import urllib.request
from urllib.parse import quote

import numpy as np
import pandas as pd
import pytest

from reachlens import Protocol
from reachlens.studies import AuditResult
from reachlens.tasks import load_task
from reachlens.tasks.chat import bind_chat
from reachlens.view import serve

SYSTEM = "Answer with a number."


@pytest.mark.parametrize("name", ["qwen2.5-instruct", "llama3-instruct"])
def test_chat_special_tokens_are_marked_on_the_question_page(real_checkpoint, tmp_path, name) -> None:
    from transformers import AutoTokenizer

    folder = real_checkpoint(name)  # a tiny model beside the real tokenizer and its chat template
    tok = AutoTokenizer.from_pretrained(str(folder))
    task = load_task("arith", n=3)
    protocol = bind_chat(Protocol("arith", k=2, temperature=1.0, max_new_tokens=8, prompt_format="chat",
                                  system=SYSTEM).resolved(task), tok)
    qids = [q.question_id for q in task.questions]
    samples = pd.DataFrame([{"question_id": q, "candidate_idx": j, "text": "#### 1", "answer": "1", "correct": False,
                             "scored": True, "finish_reason": "stop", "n_tokens": 2, "mean_logprob": -0.1}
                            for q in qids for j in range(2)])
    questions = pd.DataFrame({"question_id": qids, "realized": False, "reachable": False, "n_correct": 0,
                              "n_scored": 2, "k": 2, "propensity": 0.0, "deployed_answer": "1",
                              "deployed_text": "#### 1", "deployed_scored": True, "deployed_finish": "stop",
                              "gold": [q.gold for q in task.questions], "labels": None})
    AuditResult.new(protocol, {"spec": str(folder), "fingerprint": name}, questions, samples,
                    dict(task.data_identity)).save(tmp_path / "audit")
    server = serve([tmp_path / "audit"])
    try:
        q = task.questions[1]
        page = urllib.request.urlopen(f"{server.url}frag/question?question={quote(q.question_id)}").read().decode()
        assert 'id="prompt" data-pending="prompt"' in page  # the page asks for the prompt apart
        page = urllib.request.urlopen(f"{server.url}frag/prompt?question={quote(q.question_id)}").read().decode()
    finally:
        server.shutdown()
    found = re.search(r'<pre class="prompt">(.*?)</pre>', page, re.S)
    assert found, page[:2000]
    prompt = found.group(1)
    marked = [html.unescape(t) for t in re.findall(r'<span class="special">(.*?)</span>', prompt, re.S)]
    # the reference: the tokenizer's own chat template, its ids, the special ones among them
    text = task.format("qa").render(q)
    ids = tok.apply_chat_template([{"role": "system", "content": SYSTEM}, {"role": "user", "content": text}],
                                  add_generation_prompt=True, tokenize=True)
    ids = list(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids)
    special = set(tok.all_special_ids) | {i for i, t in tok.added_tokens_decoder.items() if t.special}
    want = [tok.convert_ids_to_tokens(i) for i in ids if i in special]
    assert len(want) >= 3 and marked == want
    shown = html.unescape(re.sub(r"<[^>]+>", "", prompt))
    assert shown == tok.decode(ids, skip_special_tokens=False)  # every piece, in order, nothing added
    assert text in shown and SYSTEM in shown
