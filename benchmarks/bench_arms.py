"""N intervention arms in one batch vs one arm at a time, at the engine level.

    python benchmarks/bench_arms.py [--model zoo:base] [--n 60] [--max-new-tokens 96] [--threads 1] [--rounds 3]

The workload of a silencing sweep's decode: greedy generation of ``--n`` arith questions under
every (layer, component) zero-ablation of the model (all layers x {mlp, attn}) and the plain model.
**One at a time** (what the sweep does now): one ``generate`` call per arm, its whole-batch hooks
attached (``zero_ablation(model, layer, comp)``). **Arms**: one ``generate`` call whose rows carry
their arm (``Row(q, arm=(layer, comp))``) under the per-arm hooks of every arm, so each question's
arms decode side by side, prefilled in one forward. Both run the engine's defaults (prefix
sharing, ``max_batch_rows``), alternate round by round, and must give the same tokens for every
(question, arm). Prints the median wall and CPU seconds of each and, last, ``ratio: N.NNx`` (one at
a time / arms, in this process's CPU seconds, which another job on a shared host moves far less
than wall seconds when torch runs one thread; higher is better).
"""

from __future__ import annotations

import argparse

from _timing import print_medians, print_ratios, race


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="zoo:base")
    ap.add_argument("--task", default="arith")
    ap.add_argument("--n", type=int, default=60, help="questions")
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--max-batch-rows", type=int, default=256)
    ap.add_argument("--components", default="mlp,attn")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()

    import torch

    from reachlens.engine import Row, generate
    from reachlens.interventions import zero_ablation
    from reachlens.models import load_model
    from reachlens.protocol import Protocol
    from reachlens.tasks import load_task

    torch.set_num_threads(args.threads)
    model = load_model(args.model)
    task = load_task(args.task, n=args.n)
    protocol = Protocol.greedy(args.task, max_new_tokens=args.max_new_tokens).resolved(task)
    fmt = task.format(protocol.prompt_format)
    prompts = [fmt.render(q) for q in task.questions]
    arms = [(layer, comp) for layer in range(len(model.blocks)) for comp in args.components.split(",")]
    kw = dict(max_batch_rows=args.max_batch_rows)

    def one_at_a_time() -> dict:
        out = {None: generate(model, prompts, [Row(i) for i in range(len(prompts))], protocol, **kw)}
        for arm in arms:
            with model.hooks(fwd_hooks=zero_ablation(model, *arm)):
                out[arm] = generate(model, prompts, [Row(i) for i in range(len(prompts))], protocol, **kw)
        return {(i, arm): outs[i].token_ids for arm, outs in out.items() for i in range(len(prompts))}

    hooks = [h for arm in arms for h in zero_ablation(model, *arm, arm=arm)]
    rows = [Row(i, arm=arm) for i in range(len(prompts)) for arm in (None, *arms)]

    def batched() -> dict:
        with model.hooks(fwd_hooks=hooks):
            outs = generate(model, prompts, rows, protocol, **kw)
        return {(r.prompt, r.arm): o.token_ids for r, o in zip(rows, outs)}

    times, results = race({"one arm at a time": one_at_a_time, "arms in one batch": batched}, args.rounds)
    a, b = results.values()
    same = a == b
    tokens = sum(len(t) for t in a.values())
    print(f"{args.model}: {len(prompts)} questions x {len(arms) + 1} arms (plain + {len(arms)} zero-ablations), greedy "
          f"<= {args.max_new_tokens} tokens ({tokens} tokens in all), {args.threads} thread(s), {args.rounds} rounds")
    print_medians(times, 20)
    print(f"  same tokens for every (question, arm): {same}")
    if not same:
        diff = [k for k in a if a[k] != b[k]]
        print(f"  differing: {len(diff)} of {len(a)}, e.g. {diff[:5]}")
    print_ratios(times, "one arm at a time", "arms in one batch")


if __name__ == "__main__":
    main()
