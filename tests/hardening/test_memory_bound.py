"""The memory bound of ``--k`` is the least of physical memory, the process's own cgroup (v1 and v2, nested) and
``RLIMIT_AS`` (issue 36, third pass, finding 7).

Before: ``machine_memory`` read only the cgroup v2 root, so under cgroup v1, a nested v2 cgroup or ``ulimit -v``,
``(ulimit -v 3500000; reachlens audit zoo:base --task arith --n 1 --k 3000000 --max-new-tokens 4 ...)`` passed the
check and died after 108 s with an allocator traceback. The cgroup trees here are built in the test (a fake
``/proc/self`` and ``/sys/fs/cgroup``); the ``ulimit -v`` case runs the CLI in a subprocess under a lowered
``RLIMIT_AS``.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from reachlens.engine.memory import machine_memory

GiB = 1 << 30
REPO = Path(__file__).resolve().parents[2]


def _machine(tmp_path: Path, cgroup: str, limits: dict[str, str]) -> tuple[Path, Path]:
    """A fake ``/proc/self`` (its ``cgroup`` file) and cgroup mount holding ``limits`` (relative path -> text)."""
    proc, root = tmp_path / "proc", tmp_path / "cgroup"
    proc.mkdir()
    (proc / "cgroup").write_text(cgroup)
    for rel, text in limits.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text + "\n")
    return proc, root


def _physical() -> int:
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.parametrize("cgroup, limits, expect", [
    # cgroup v2, nested: the limit is set on a parent of the process's own cgroup, the root has none
    ("0::/user.slice/job.scope\n", {"memory.max": "max", "user.slice/memory.max": str(GiB // 2),
                                    "user.slice/job.scope/memory.max": "max"}, GiB // 2),
    # cgroup v2: the process's own cgroup is the tighter one
    ("0::/a/b\n", {"a/memory.max": str(GiB), "a/b/memory.max": str(GiB // 4)}, GiB // 4),
    # cgroup v1, nested (the root's "no limit" is a huge number)
    ("12:cpu,cpuacct:/x\n4:memory:/process_api/abc\n", {
        "memory/memory.limit_in_bytes": "9223372036854771712",
        "memory/process_api/memory.limit_in_bytes": str(GiB // 3),
        "memory/process_api/abc/memory.limit_in_bytes": str(GiB)}, GiB // 3),
    # both hierarchies (a hybrid machine): the least of them
    ("4:memory:/m\n0::/u\n", {"memory/m/memory.limit_in_bytes": str(GiB // 5), "u/memory.max": str(GiB // 6)},
     GiB // 6),
    # a path that climbs out ('..') is not followed above the mount
    ("0::/../../etc\n", {"etc/memory.max": str(GiB // 7), "memory.max": str(GiB // 8)}, GiB // 8),
])
def test_the_smallest_cgroup_limit_up_the_tree_is_the_bound(tmp_path, cgroup, limits, expect) -> None:
    proc, root = _machine(tmp_path, cgroup, limits)
    assert machine_memory(proc=proc, cgroups=root) == min(expect, _physical())


def test_no_limit_anywhere_is_physical_memory(tmp_path) -> None:
    proc, root = _machine(tmp_path, "0::/u\n4:memory:/m\n", {"memory.max": "max", "u/memory.max": "max",
                                                             "memory/m/memory.limit_in_bytes": "9223372036854771712"})
    if resource.getrlimit(resource.RLIMIT_AS)[0] != resource.RLIM_INFINITY:
        pytest.skip("this process runs under ulimit -v")
    assert machine_memory(proc=proc, cgroups=root) == _physical()
    assert machine_memory(proc=tmp_path / "nowhere", cgroups=tmp_path / "nowhere") == _physical()


def _limited(bytes_: int):
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (bytes_, bytes_))

    return limit


def test_rlimit_as_bounds_what_is_left_beyond_what_the_process_maps() -> None:
    code = ("import resource; from reachlens.engine.memory import machine_memory; "
            "mapped = int(open('/proc/self/statm').read().split()[0]) * resource.getpagesize(); "
            "print(machine_memory(), mapped)")
    limit = 3 * GiB
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                          preexec_fn=_limited(limit), env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    memory, mapped = map(int, done.stdout.split())
    assert 0 < memory <= limit - mapped + (64 << 20)  # what was left when it looked (it maps a little more since)


def test_audit_under_ulimit_v_refuses_an_impossible_k_before_building_rows(tmp_path) -> None:
    """The issue's reproduction, under ``RLIMIT_AS`` of 4 GiB: refused in one line, nothing written."""
    out = tmp_path / "kbig"
    done = subprocess.run(
        [sys.executable, "-m", "reachlens", "audit", "zoo:base", "--task", "arith", "--n", "1", "--k", "3000000",
         "--max-new-tokens", "4", "--out", str(out)],
        capture_output=True, text=True, timeout=900, preexec_fn=_limited(4 * GiB),
        env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=tmp_path)
    assert done.returncode == 2, done.stderr[-3000:]
    lines = [ln for ln in done.stderr.splitlines() if "error:" in ln]
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert "k=3000000: one question's 3,000,001 completions" in lines[0] and "ulimit -v" in lines[0]
    assert "use k <= " in lines[0]
    assert not out.exists()


def test_decode_bound_counts_the_vocabulary_and_the_kv_cache(tiny_model, tiny_hf, monkeypatch):
    """A decode batch's bytes a row come from the HF config by hand (8 float32 vocabulary passes, keys and values
    of every layer and KV head at each position); a batch over half the memory is refused before the prefill,
    naming the max_batch_rows that fits, and that many rows decode."""
    from reachlens.engine import Row, generate
    from reachlens.engine.memory import VOCAB_PASSES, decode_row_bytes
    from reachlens.errors import ReachlensError
    from reachlens.protocol import Protocol

    cfg = tiny_hf.config
    length = 40
    kv = 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * (cfg.hidden_size // cfg.num_attention_heads) * 4 * length
    per_row = VOCAB_PASSES * 4 * cfg.vocab_size + kv
    assert decode_row_bytes(tiny_model, length) == per_row
    prompt = "Q: 1+2=?\nA:"
    n_prompt = len(tiny_model.tokenizer(prompt)["input_ids"])
    fit = 6
    monkeypatch.setattr("reachlens.engine.memory.machine_memory",
                        lambda: 2 * fit * decode_row_bytes(tiny_model, n_prompt + 8) + 1)
    protocol = Protocol("arith", k=10, temperature=1.0, max_new_tokens=8)
    rows = [Row(0, seed=i) for i in range(10)]
    with pytest.raises(ReachlensError, match=rf"max_batch_rows=10: a decode batch of 10 rows .* max_batch_rows <= {fit}"):
        generate(tiny_model, [prompt], rows, protocol, max_batch_rows=10)
    assert len(generate(tiny_model, [prompt], rows, protocol, max_batch_rows=fit)) == 10
