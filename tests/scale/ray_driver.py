"""Audits of zoo:base on a local Ray cluster, for tests/scale/test_ray_executor.py (run isolated).

    python tests/scale/ray_driver.py --out A [--out-killed B] [--events FILE]

``--out``: two workers, nothing killed. ``--out-killed``: the same audit, and the first worker that
starts a slice after another slice has finished is killed (SIGKILL to its process) mid-slice.
Writes one JSON line per executor event, then ``{"finished": ...}``, to ``--events`` (default: stdout). A
file of its own: Ray prints its workers' and raylet's log lines to the driver's stdout from another thread,
and one of them can land inside an event's line.
"""

from __future__ import annotations

import argparse
import json
import os
import signal

import reachlens
from reachlens.execution import ExecConfig
from reachlens import Protocol
from reachlens.runner import RayExecutor

N, K, MAX_NEW_TOKENS, MAX_BATCH_ROWS = 24, 16, 32, 4 * 17  # six slices of four questions


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--out-killed")
    ap.add_argument("--events", help="where the JSON event lines go (default: stdout)")
    args = ap.parse_args()
    events = open(args.events, "a", encoding="utf-8") if args.events else None

    def emit(event: dict) -> None:
        print(json.dumps(event), file=events, flush=True)

    task = reachlens.load_task("arith", n=N)
    protocol = Protocol("arith", k=K, max_new_tokens=MAX_NEW_TOKENS)
    pids: dict[int, int] = {}
    state = {"kill": False, "done": 0, "killed": None}

    def on_event(kind, info):
        emit({"event": kind, **{k: v for k, v in info.items() if k != "error"}})
        if kind == "ready":
            pids[info["worker"]] = info["pid"]
        elif kind == "done":
            state["done"] += 1
        elif kind == "start" and state["kill"] and state["killed"] is None and state["done"] >= 1:
            state["killed"] = info["worker"]
            os.kill(pids[info["worker"]], signal.SIGKILL)

    with RayExecutor(workers=2, init_options={"num_cpus": 2}, on_event=on_event) as executor:
        reachlens.audit("zoo:base", task, protocol, out=args.out, exec_config=ExecConfig(max_batch_rows=MAX_BATCH_ROWS), executor=executor)
        if args.out_killed:
            state.update(kill=True, done=0)
            reachlens.audit("zoo:base", task, protocol, out=args.out_killed, exec_config=ExecConfig(max_batch_rows=MAX_BATCH_ROWS),
                            executor=executor)
    emit({"finished": True, "killed_worker": state["killed"]})


if __name__ == "__main__":
    main()
