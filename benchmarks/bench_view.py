"""`reachlens view` at the demo's size (issue 58, item 4): time to the question list, time to one question, and the
server's memory as K x N grows.

    python benchmarks/bench_view.py [--run DIR] [--work DIR] [--n 300] [--k 200] [--audits 16] [--chars 300]

Without ``--run`` it writes a run of the demo's shape into ``--work``: ``--audits`` audits of n questions x K
samples (each sample a text of about ``--chars`` characters, as the zoo's arith_hard completions are), paired into
comparisons saved beside them (``reachlens compare --out``), so the viewer finds the demo's number of question
sets and tables. The tables are made by hand (random grades), which changes nothing the viewer reads: it reads
the same files in the same way. Each figure is measured in a fresh process (``python -c``), so nothing is warm:

* ``import``: ``import reachlens.view`` (reachlens and torch), apart;
* ``list``: from the import to the first set's question list over HTTP (the server started on every set, the
  comparison's join and both audits' question tables read, the list fragment rendered); target under 2 s. The
  server answers it without waiting for the questions' texts (a run stores none: the task is rebuilt for them, in
  a background thread); ``texts`` is the time the same list with them then takes (``texts=wait``, as the page asks);
* ``question``: one question of that set opened (both sides' samples' answers and grades read from the parquet
  files, grouped and rendered; no text), the last question of the table (the farthest in the file; the first
  opened builds the index of where each question's rows are), then one in the middle; target under 0.5 s; its
  ``prompt`` (the task and the tokenizer loaded for it), which the page asks for apart, and its last sample's text
  opened (``sample``), apart; each with the process's CPU seconds beside the wall seconds;
* ``memory``: the peak resident memory the process gained opening that question and its last sample's text (the
  peak ``VmHWM``, reset through ``/proc/self/clear_refs`` just before, minus the resident memory then), at K and at
  10 x K; target: 10 x K costs no more than 2 x. The last line is all of it as JSON.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

PROBE = r"""
import json, sys, time, urllib.request
from urllib.parse import quote
t_start = time.perf_counter()
from reachlens.view import serve
t0, c0 = time.perf_counter(), time.process_time()
t_import = t0 - t_start
server = serve([sys.argv[1]])
first = server.sets[0]
def get(path):
    t, c = time.perf_counter(), time.process_time()
    body = urllib.request.urlopen(server.url + path).read()
    return body, time.perf_counter() - t, time.process_time() - c
at = "frag/list?set=" + quote(first.key)
body = urllib.request.urlopen(server.url + at).read()
t_list, c_list = time.perf_counter() - t0, time.process_time() - c0
full, t_texts, c_texts = get(at + "&texts=wait")
assert b"data-pending" not in full
ids = first.table(wait=False)["question_id"]
qid = ids.iloc[-1]
def status(key):
    line = next(ln for ln in open("/proc/self/status") if ln.startswith(key + ":"))
    return int(line.split()[1]) * 1024
open("/proc/self/clear_refs", "w").write("5")  # the peak (VmHWM) starts again from the resident memory now
before = status("VmRSS")
ask = "frag/question?set=" + quote(first.key) + "&question="
page, t_q, c_q = get(ask + quote(qid))
assert b"samples correct" in page, page[:500]
last = first.sides[0].samples(qid, ["candidate_idx"])["candidate_idx"].iloc[-1]
text, t_s, c_s = get("frag/sample?set=" + quote(first.key) + "&question=" + quote(qid) + f"&side=0&idx={last}")
peak = status("VmHWM")
assert b"tokens]" in text, text[:500]
prompt, t_p, c_p = get("frag/prompt?set=" + quote(first.key) + "&question=" + quote(qid))
assert b'class="prompt"' in prompt, prompt[:500]
_, t_q2, c_q2 = get(ask + quote(ids.iloc[len(ids) // 2]))
print(json.dumps({"import_s": t_import, "list_s": t_list, "list_cpu_s": c_list, "texts_s": t_texts,
                  "texts_cpu_s": c_texts, "question_s": t_q, "question_cpu_s": c_q, "prompt_s": t_p, "prompt_cpu_s": c_p,
                  "sample_s": t_s, "sample_cpu_s": c_s,
                  "next_question_s": t_q2, "next_question_cpu_s": c_q2, "sets": len(server.sets),
                  "rss_before": before, "peak_gain": max(0, peak - before), "peak": peak}))
"""


def make_run(root: Path, n: int, k: int, audits: int, chars: int) -> None:
    """``audits`` hand-made audits of n x K and a comparison of each pair (0-1, 2-3, ...) under ``root``."""
    import numpy as np
    import pandas as pd

    from reachlens import Protocol
    from reachlens.studies import AuditResult, compare
    from reachlens.tasks import load_task

    protocol = Protocol("arith_hard", k=k, temperature=0.8, max_new_tokens=128).resolved(load_task("arith_hard", n=1))
    rng = np.random.default_rng(0)
    qids = [q.question_id for q in load_task("arith_hard", n=n).questions]  # the task's: its texts and prompts found
    filler = ("Let me compute step by step. " * (chars // 29 + 1))[:chars]
    for a in range(audits):
        rate = rng.uniform(0, 1, n) ** 2
        correct = rng.uniform(0, 1, (n, k)) < rate[:, None]
        samples = pd.DataFrame({
            "question_id": np.repeat(qids, k), "candidate_idx": np.tile(np.arange(k), n),
            "text": [f"{filler} {j}" for j in range(n * k)], "answer": np.where(correct.ravel(), "42", "41"),
            "correct": correct.ravel(), "scored": True, "finish_reason": "stop", "n_tokens": 60, "mean_logprob": -0.4})
        nc = correct.sum(axis=1)
        realized = rng.uniform(0, 1, n) < rate
        questions = pd.DataFrame({
            "question_id": qids, "realized": realized, "reachable": nc > 0, "n_correct": nc, "n_scored": k, "k": k,
            "propensity": nc / k, "deployed_answer": np.where(realized, "42", "41"), "deployed_text": filler,
            "deployed_scored": True, "deployed_finish": "stop", "gold": "42", "labels": None})
        AuditResult.new(protocol, {"spec": "zoo:base", "fingerprint": f"m{a}"}, questions, samples,
                        {"generator": "arith_hard", "seed": 0, "split": "test"}).save(root / "audits" / f"m{a}")
    for a in range(0, audits - 1, 2):
        compare(root / "audits" / f"m{a}", root / "audits" / f"m{a + 1}").save(root / "comparisons" / f"m{a}--m{a + 1}")


def probe(run: Path) -> dict:
    out = subprocess.run([sys.executable, "-c", PROBE, str(run)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", default=None, help="a run directory to open (default: write one of the demo's shape)")
    ap.add_argument("--work", default="runs/bench-view")
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--k", type=int, default=200)
    ap.add_argument("--audits", type=int, default=16)
    ap.add_argument("--chars", type=int, default=300)
    args = ap.parse_args()
    runs = {}
    if args.run:
        runs["given"] = Path(args.run)
    else:
        for k in (args.k, 10 * args.k):
            root = Path(args.work) / f"k{k}"
            if not root.exists():
                t = time.perf_counter()
                make_run(root, args.n, k, args.audits if k == args.k else 2, args.chars)
                print(f"wrote {root} in {time.perf_counter() - t:.0f} s")
            runs[f"K={k}"] = root
    results = {name: probe(path) for name, path in runs.items()}
    for name, r in results.items():
        print(f"{name}: {r['sets']} sets; import {r['import_s']:.1f} s; list {r['list_s']:.2f} s "
              f"({r['list_cpu_s']:.2f} CPU s), its question texts {r['texts_s']:.2f} s more ({r['texts_cpu_s']:.2f} CPU "
              f"s); question {r['question_s']:.3f} s ({r['question_cpu_s']:.3f} CPU s; first; the next "
              f"{r['next_question_s']:.3f} s), its prompt {r['prompt_s']:.3f} s ({r['prompt_cpu_s']:.3f} CPU s), its last "
              f"sample's text {r['sample_s']:.3f} s; "
              f"memory gained opening it {r['peak_gain'] / 2**20:.1f} MiB (resident before {r['rss_before'] / 2**20:.0f}"
              f" MiB)")
    if len(results) == 2:
        a, b = results.values()
        print(f"memory ratio 10xK / K: {b['peak_gain'] / max(a['peak_gain'], 1):.2f}x (target <= 2x)")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
