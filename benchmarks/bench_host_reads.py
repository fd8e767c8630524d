"""Host reads per decoding step of ``generate`` on the CPU (on a GPU each is a host-device synchronisation).

    python benchmarks/bench_host_reads.py [--model zoo:base] [--k 32] [--new 16]

One K-sample ``generate`` of one prompt (EOS off, T=1.0) under :class:`~reachlens.engine.host_reads.HostReads`, at
``--new`` and at twice as many new tokens (each after a warm-up call): the extra steps' reads per step, the fixed
reads of a call, and the reads by operator. A decoding step needs one (its new tokens).
"""

from __future__ import annotations

import argparse


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="zoo:base")
    ap.add_argument("--k", type=int, default=32)
    ap.add_argument("--new", type=int, default=16)
    args = ap.parse_args()

    from reachlens.engine import Row, generate
    from reachlens.engine.host_reads import HostReads
    from reachlens.models import load_model
    from reachlens.protocol import Protocol

    model = load_model(args.model)
    prompt, rows = ["Q: 12+34=?\nA:"], [Row(0, seed=s) for s in range(args.k)]

    def reads(new: int) -> HostReads:
        protocol = Protocol("arith", k=args.k, temperature=1.0, max_new_tokens=new)
        generate(model, prompt, rows, protocol, stop_at_eos=False)
        with HostReads() as counted:
            generate(model, prompt, rows, protocol, stop_at_eos=False)
        return counted

    short, long = reads(args.new), reads(2 * args.new)
    per_step = (long.total - short.total) / args.new
    print(f"reads at {args.new} steps {short.total}, at {2 * args.new} steps {long.total}: {per_step:.2f} per step, "
          f"{short.total - per_step * args.new:.0f} per call")
    print("by operator at", 2 * args.new, "steps:", dict(long.by_op.most_common()))
    print("by line:", dict(long.by_line.most_common(8)))


if __name__ == "__main__":
    main()
