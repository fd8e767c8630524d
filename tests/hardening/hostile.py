"""Shared pieces of the hardening tests (issue 25, second pass): hostile strings, a hostile audit made by hand,
the CLI called in-process. (The tiny finished audit they share, ``finished_audit``, is a session fixture of
``tests/conftest.py``.)"""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pandas as pd

SCRIPT = "<script>window.__pwned=1;document.title='PWNED'</script>"
"""A script payload (it holds a '/', so it cannot be a folder name)."""
IMG = "<img src=x onerror=\"window.__pwned=1;document.title='PWNED'\">"
"""An event-handler payload (no '/': it can be a folder name)."""
ESC = "\x1b]0;owned\x07\x1b[2K\r\x9b31m"
"""Terminal control: an OSC window title, a CSI line erase, a carriage return, a C1 CSI."""
CONTROL = set(map(chr, [*range(0x00, 0x09), *range(0x0b, 0x20), *range(0x7f, 0xa0)]))
"""Bytes no output of reachlens may hold raw (tab and newline aside)."""


def cli(capsys, *argv) -> tuple[int, str, str]:
    """``reachlens ARGV`` in-process: (exit status, stdout, stderr)."""
    from reachlens.cli import main

    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def error_line(err: str) -> str:
    """The one error line of a refused command (no traceback)."""
    lines = [ln for ln in err.strip().splitlines() if "error:" in ln]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def edit_record(run_dir: Path, **fields) -> None:
    """Set top-level fields of ``run_dir/run.json`` (a value of ``...`` deletes the field)."""
    path = run_dir / "run.json"
    d = json.loads(path.read_text())
    for key, value in fields.items():
        if value is ...:
            d.pop(key, None)
        else:
            d[key] = value
    path.write_text(json.dumps(d))


def snapshot(folder: Path, skip: Path | None = None) -> dict[str, tuple]:
    """Every entry under ``folder`` (but under ``skip``), by relative path: its kind, its mode and its link target
    or bytes. Links are not followed and FIFOs not opened, so two snapshots differ when anything there was
    created, moved, removed or changed."""
    out: dict[str, tuple] = {}
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            p = Path(root) / name
            if skip is not None and (p == skip or skip in p.parents):
                continue
            mode = os.lstat(p).st_mode
            kind = "link" if stat.S_ISLNK(mode) else "dir" if stat.S_ISDIR(mode) else \
                "file" if stat.S_ISREG(mode) else "other"
            body = os.readlink(p) if kind == "link" else p.read_bytes() if kind == "file" else None
            out[str(p.relative_to(folder))] = (kind, stat.S_IMODE(mode), body)
    return out


def copy_of(run_dir: Path, dest: Path) -> Path:
    return Path(shutil.copytree(run_dir, dest))


def hostile_audit(name: str = "base", *, realized=(True, False, True), n_correct=(1, 0, 2)):
    """An audit made by hand whose every string is a payload: question ids, answers, gold, labels, the model
    spec and fingerprint, the protocol's strings and the data identity."""
    from reachlens import Protocol
    from reachlens.studies import AuditResult

    k = 2
    protocol = Protocol(f"arith{SCRIPT}", split=IMG, k=k, temperature=1.0, max_new_tokens=4,
                        prompt_format=f"fmt{IMG}{ESC}", stop=(SCRIPT, "a|b"), grader=f"numeric{SCRIPT}")
    qids = [f"q{i}{SCRIPT}" if i % 2 else f"q{i}{IMG}|x\ny{ESC}" for i in range(len(realized))]
    q = pd.DataFrame({
        "question_id": qids, "realized": list(realized), "reachable": [c > 0 for c in n_correct],
        "n_correct": list(n_correct), "n_scored": [k] * len(qids), "k": k, "propensity": [c / k for c in n_correct],
        "deployed_answer": IMG, "deployed_text": SCRIPT, "deployed_scored": True, "deployed_finish": f"stop{IMG}",
        "gold": SCRIPT, "labels": IMG,
    })
    rows = [{"question_id": qid, "candidate_idx": j, "text": SCRIPT, "answer": f"=HYPERLINK(1){IMG}", "correct": j < c,
             "scored": True, "finish_reason": IMG, "n_tokens": 1, "mean_logprob": -1.0}
            for qid, c in zip(qids, n_correct) for j in range(k)]
    model = {"spec": f"{name}{SCRIPT}{ESC}", "fingerprint": f"sha256:{IMG}"}
    return AuditResult.new(protocol, model, q, pd.DataFrame(rows), {"file": IMG, "sha256": SCRIPT})
