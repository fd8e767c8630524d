"""The silencing sweep, one condition at a time vs every condition as an arm of one batch.

    python benchmarks/bench_sweep.py [--model zoo:base] [--failures 60 --healthy 60] [--components mlp,attn]
        [--threads 1] [--rounds 1] [--max-batch-rows N] [--sets FILE] [--profile]

The sweep (:func:`reachlens.studies.causal.silence_sweep`) of every layer x ``--components`` plus the
plain model, over a failure set and a healthy panel chosen on ``arith_mc`` (``--pool`` questions,
recognized-not-realized and right-both-ways, capped at ``--failures`` / ``--healthy``; ``--sets`` reuses a
saved ``sets.json``; ``--max-batch-rows`` sets the most rows decoded together in both modes, which only
the arms can fill: one condition has ``failures + healthy`` rows). **One at a time** (``one_at_a_time=True``, the sweep's old way): one decode per
condition with its whole-batch hooks. **Arms** (the default): one decode whose rows carry their
condition's arm, each question's prompt prefilled once per arm. The two must give equal tables
(``pandas.testing.assert_frame_equal``, exact; asserted). Prints the median wall and CPU seconds of each
and, last, ``ratio: N.NNx`` (one at a time / arms, in this process's CPU seconds, which another job on
a shared host moves far less than wall seconds when torch runs one thread; higher is better).
``--profile`` prints where the arms' CPU time goes (torch.profiler, by operator, then by operator and input
shape: a prefill's operators carry the prompt's positions) instead.

Per mode it also counts the work (:class:`Work`): forwards of the layer stack (prompt prefills and
decoding steps), and the token positions they compute (batch entries x positions, summed). Arms can
only remove work counted per forward (Python, hook dispatch, kernel launches); the positions computed
are the same in both modes unless arms share some (prefill or prefixes).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
from collections.abc import Iterator

from _timing import print_medians, print_ratios, race


@dataclasses.dataclass
class Work:
    """What one sweep asked of the layer stack."""

    prefills: int = 0
    steps: int = 0
    prefill_positions: int = 0
    """Prompt token positions prefilled (batch entries x padded width, summed over prefills)."""
    step_positions: int = 0
    """Batch entries of the decoding steps, summed (free slots included)."""
    other: int = 0
    """Forwards without a KV cache (not decoding: e.g. a one-token forward that sizes an intervention)."""

    def __str__(self) -> str:
        return (f"{self.prefills} prefills ({self.prefill_positions:,} positions), {self.steps} decoding forwards "
                f"({self.step_positions:,} entries, {self.step_positions / max(self.steps, 1):.0f} per forward), "
                f"{self.other} other")


@contextlib.contextmanager
def counting(work: Work) -> Iterator[Work]:
    """Within the block, every :meth:`LayerStack.forward` adds its shape to ``work``."""
    from reachlens.engine.stack import LayerStack

    original = LayerStack.forward

    def forward(self, input_ids, **kwargs):
        b, pos = input_ids.shape
        cache = kwargs.get("cache")
        if cache is None:
            work.other += 1
        elif pos == 1 and cache.length:
            work.steps += 1
            work.step_positions += b
        else:
            work.prefills += 1
            work.prefill_positions += b * pos
        return original(self, input_ids, **kwargs)

    LayerStack.forward = forward
    try:
        yield work
    finally:
        LayerStack.forward = original


def choose_sets(model, args):
    from reachlens.protocol import Protocol
    from reachlens.studies.recognition import EvalSets, FailureRule, TaskSpec, compare_modes, select_sets

    if args.sets:
        return EvalSets.load(args.sets)
    spec = TaskSpec("arith_mc", n=args.pool)
    result = compare_modes(model, spec.load(), Protocol.greedy("arith_mc"))
    return select_sets(result, FailureRule("acc", min_failures=args.failures, max_failures=args.failures,
                                           max_healthy=args.healthy), spec)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="zoo:base")
    ap.add_argument("--pool", type=int, default=300, help="arith_mc questions the sets are chosen from")
    ap.add_argument("--failures", type=int, default=60)
    ap.add_argument("--healthy", type=int, default=60)
    ap.add_argument("--sets", default=None, help="a saved sets.json instead of choosing sets")
    ap.add_argument("--components", default="mlp,attn")
    ap.add_argument("--max-batch-rows", type=int, default=None,
                    help="most rows decoded together, in both modes (default: the sets' recognition config's, 256)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()

    import pandas as pd
    import torch

    from reachlens.models import load_model
    from reachlens.studies.causal import silence_sweep

    torch.set_num_threads(args.threads)
    model = load_model(args.model)
    sets = choose_sets(model, args)
    if args.max_batch_rows:
        sets = dataclasses.replace(sets, config=dataclasses.replace(sets.config, max_batch_rows=args.max_batch_rows))
    task = sets.task.load()
    components = args.components.split(",")
    n_conditions = 1 + len(model.blocks) * len(components)
    print(f"{args.model}: silence sweep, {len(model.blocks)} layers x {components} + none = {n_conditions} conditions, "
          f"{len(sets.failure)} failures + {len(sets.healthy)} healthy, greedy <= {sets.protocol.max_new_tokens} tokens, "
          f"{args.threads} thread(s), max_batch_rows {sets.config.max_batch_rows}")
    if args.profile:
        from torch.profiler import ProfilerActivity, profile

        silence_sweep(model, task, sets, components=components)  # warm-up
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
            silence_sweep(model, task, sets, components=components)
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))
        # by input shape: a prefill's operators carry the prompt's positions ([rows, 25, ...]), a step's one
        print(prof.key_averages(group_by_input_shape=True).table(sort_by="self_cpu_time_total", row_limit=25,
                                                                 max_name_column_width=30, max_shapes_column_width=70))
        return

    modes = {"one at a time": True, "arms in one batch": False}
    for name, one in modes.items():  # untimed: what each mode asks of the layer stack
        with counting(Work()) as work:
            silence_sweep(model, task, sets, components=components, one_at_a_time=one)
        print(f"  {name:18s} {work}")
    times, results = race({name: functools.partial(silence_sweep, model, task, sets, components=components,
                                                   one_at_a_time=one) for name, one in modes.items()}, args.rounds)
    a, b = results.values()
    pd.testing.assert_frame_equal(a.table, b.table, check_exact=True)
    pd.testing.assert_frame_equal(a.per_question, b.per_question, check_exact=True)
    print_medians(times, 18)
    print(f"  tables equal (table and per-question, exact): True; {len(a.per_question)} (condition, question) rows")
    print_ratios(times, "one at a time", "arms in one batch")


if __name__ == "__main__":
    main()
