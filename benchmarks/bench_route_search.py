"""A route search's decoding: one engine call per distinct route vs every route's rows in one batch.

    python benchmarks/bench_route_search.py [--model zoo:base] [--n 30] [--budget 16] [--strategy random]
                                            [--space native] [--max-new-tokens 96] [--threads 1] [--rounds 3]

The workload of ``reachlens route``: :func:`reachlens.routing.run_routing` of ``--n`` arith questions, a
``--budget`` of greedy route evaluations per question drawn by ``--strategy`` from ``--space``. A random
search's routes are mostly distinct per question, so most distinct routes are asked for by one or two
questions. **One call per route** (reachlens before rows carried routes): the evaluator's
:func:`~reachlens.routing.executor.generate_along_routes` replaced by one ``generate(route=r)`` per distinct
route, each decoding the questions that asked for it. **Rows on routes** (now): one ``generate`` call whose rows
carry their route (``Row.route``; each route step runs each layer once, on the rows whose route runs it).
Each round makes a new evaluator (nothing memoized across rounds); both ways must give the same candidates
table (text, answer, grade of every evaluation). Prints the median wall and CPU seconds of each and, last,
``ratio: N.NNx`` (one call per route / rows on routes, in this process's CPU seconds; higher is better).
"""

from __future__ import annotations

import argparse

from _timing import print_medians, print_ratios, race


def one_call_per_route(model, prompts, requests, protocol, *, stop_at_eos=True, max_batch_rows=256, fused=True):
    """``generate_along_routes`` as it was: the requests grouped by route, one engine call per route."""
    from reachlens.engine import Row, generate

    by_route: dict = {}
    for i, req in enumerate(requests):
        by_route.setdefault(tuple(req.route), {}).setdefault((req.prompt, req.seed), []).append(i)
    out = [None] * len(requests)
    for route, wanted in by_route.items():
        keys = list(wanted)
        used = sorted({p for p, _ in keys})
        local = {p: j for j, p in enumerate(used)}
        comps = generate(model, [prompts[p] for p in used], [Row(local[p], seed) for p, seed in keys], protocol,
                         stop_at_eos=stop_at_eos, route=route, max_batch_rows=max_batch_rows, fused=fused)
        for key, comp in zip(keys, comps):
            for i in wanted[key]:
                out[i] = comp
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="zoo:base")
    ap.add_argument("--task", default="arith")
    ap.add_argument("--n", type=int, default=30, help="questions")
    ap.add_argument("--budget", type=int, default=16, help="route evaluations per question")
    ap.add_argument("--strategy", default="random")
    ap.add_argument("--space", default="native")
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()

    import pandas as pd
    import torch

    import reachlens.routing.evaluation as evaluation
    from reachlens.models import load_model
    from reachlens.protocol import Protocol
    from reachlens.routing import run_routing
    from reachlens.tasks import load_task

    torch.set_num_threads(args.threads)
    model = load_model(args.model)
    task = load_task(args.task, n=args.n)
    protocol = Protocol.greedy(args.task, max_new_tokens=args.max_new_tokens)
    batched = evaluation.generate_along_routes

    def search(decode):
        evaluation.generate_along_routes = decode
        try:
            return run_routing(model, task, args.space, args.strategy, args.budget, protocol=protocol).candidates
        finally:
            evaluation.generate_along_routes = batched

    cands = search(batched)
    routes = cands.groupby("route")["question_id"].nunique()
    print(f"{args.model}: {args.n} {args.task} questions x budget {args.budget} ({args.strategy} search over "
          f"{args.space}), {len(cands)} evaluations, {len(routes)} distinct routes, {routes.mean():.2f} questions "
          f"per route; threads={torch.get_num_threads()}, {args.rounds} rounds")
    times, results = race({"one call per route": lambda: search(one_call_per_route),
                           "rows on routes": lambda: search(batched)}, args.rounds)
    cols = ["question_id", "candidate_idx", "route", "text", "answer", "correct"]
    pd.testing.assert_frame_equal(results["one call per route"][cols], results["rows on routes"][cols])
    print("  candidates equal (text, answer, grade of every evaluation)")
    print_medians(times, 18)
    print_ratios(times, "one call per route", "rows on routes")


if __name__ == "__main__":
    main()
