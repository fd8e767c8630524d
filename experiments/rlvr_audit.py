"""The training audit for any list of (base, trained) pairs on any task: audits, joins, controls, report.

    python experiments/rlvr_audit.py --config zoo --out runs/rlvr-zoo
    python experiments/rlvr_audit.py --config qwen-math-simplerl-gsm8k --data ../shared/data/gsm8k/test.jsonl --out runs/qwen

Each configuration below is a set of checkpoints, the pairs to compare, a task and a protocol. The
literature's pairs need their weights in the local HuggingFace cache and, realistically, a GPU
(``--device cuda``); the ``zoo`` configuration runs on the shipped checkpoints on a CPU. Every run
is resumable: re-running the same command skips finished audits and finished questions.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

from reachlens import Protocol


@dataclass(frozen=True)
class Config:
    models: dict[str, str]
    pairs: tuple[tuple[str, str], ...]
    task: str
    protocol_kwargs: dict = field(default_factory=dict)
    n: int | None = None
    extended_k: int | None = None
    native_formats: dict[str, str] = field(default_factory=dict)
    control_temperatures: tuple[float, ...] = (0.6, 1.0, 1.2)
    """Temperature control: re-probe each pair's questions that left the reachable set at these."""
    length_factor: int = 2
    """Length control: flagged pairs (truncation shares more than 2 points apart) rerun at this many
    times the protocol's max_new_tokens."""


CONFIGS = {
    # The shipped zoo: base, RLVR (GRPO and DAPO losses), SFT and SFT-then-RL, on arith (CPU, minutes).
    "zoo": Config(
        models={"base": "zoo:base", "grpo": "zoo:grpo", "dapo": "zoo:dapo", "sft": "zoo:sft", "sft-grpo": "zoo:sft-grpo"},
        pairs=(("base", "grpo"), ("base", "dapo"), ("base", "sft"), ("sft", "sft-grpo")),
        task="arith", protocol_kwargs=dict(k=200, temperature=0.8, max_new_tokens=96), n=300, extended_k=400,
    ),
    # DAPO (Yu et al., 2025): Qwen2.5-32B base vs its DAPO-trained descendant, on MATH-500.
    # Needs ~65 GB of bf16 weights per model and a large GPU.
    "qwen32b-dapo-math500": Config(
        models={"base": "Qwen/Qwen2.5-32B", "dapo": "BytedTsinghua-SIA/DAPO-Qwen-32B"},
        pairs=(("base", "dapo"),), task="math500",
        protocol_kwargs=dict(k=256, temperature=0.6, top_p=0.95, max_new_tokens=4096, prompt_format="boxed"),
        extended_k=512,
    ),
    # SimpleRL-Zoo (Zeng et al., 2025): Qwen2.5-Math-7B vs SimpleRL-Zero, on GSM8K and MATH-500.
    # Hub ids are as the authors published them; check them against the hub before a run.
    "qwen-math-simplerl-gsm8k": Config(
        models={"base": "Qwen/Qwen2.5-Math-7B", "simplerl": "hkust-nlp/Qwen-2.5-Math-7B-SimpleRL-Zero"},
        pairs=(("base", "simplerl"),), task="gsm8k",
        protocol_kwargs=dict(k=256, temperature=0.6, top_p=0.95, max_new_tokens=1024),
        extended_k=512, native_formats={"simplerl": "gsm8k_cot"},
    ),
    "qwen-math-simplerl-math500": Config(
        models={"base": "Qwen/Qwen2.5-Math-7B", "simplerl": "hkust-nlp/Qwen-2.5-Math-7B-SimpleRL-Zero"},
        pairs=(("base", "simplerl"),), task="math500",
        protocol_kwargs=dict(k=256, temperature=0.6, top_p=0.95, max_new_tokens=3000, prompt_format="boxed"),
        extended_k=512,
    ),
}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", choices=sorted(CONFIGS), default="zoo")
    ap.add_argument("--pair", action="append", default=None, metavar="BASE=SPEC,TRAINED=SPEC",
                    help="ad-hoc pair instead of a configuration, e.g. base=zoo:base,rl=zoo:grpo")
    ap.add_argument("--task", default=None, help="override the configuration's task")
    ap.add_argument("--data", default=None, help="data file for file-based tasks")
    ap.add_argument("--n", type=int, default=None)
    ap.add_argument("--k", type=int, default=None)
    ap.add_argument("--budget-k", dest="extended_k", type=int, default=None)
    ap.add_argument("--temperatures", default=None,
                    help="temperature control, comma-separated (default the configuration's: 0.6,1.0,1.2); 'none' skips it")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--max-batch-rows", type=int, default=256)
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)

    from reachlens.execution import ExecConfig
    from reachlens.report import text_summary, write_report
    from reachlens.studies.training_audit import StudyPlan, run_training_audit

    cfg = CONFIGS[args.config]
    models, pairs = dict(cfg.models), cfg.pairs
    if args.pair:
        models, pairs = {}, []
        for spec in args.pair:
            try:
                (a, sa), (b, sb) = (part.split("=", 1) for part in spec.split(","))
            except ValueError:
                ap.error(f"--pair {spec!r}: expected BASE=SPEC,TRAINED=SPEC")
            models.update({a: sa, b: sb})
            pairs.append((a, b))
        pairs = tuple(pairs)
    kwargs = dict(cfg.protocol_kwargs)
    if args.k:
        kwargs["k"] = args.k
    task = args.task or cfg.task
    temps = cfg.control_temperatures if args.temperatures is None else \
        () if args.temperatures == "none" else tuple(float(t) for t in args.temperatures.split(","))
    protocol = Protocol(task, **kwargs)
    plan = StudyPlan(models, pairs, protocol, n=args.n or cfg.n, data=args.data,
                     extended_k=args.extended_k or cfg.extended_k, native_formats=cfg.native_formats,
                     control_temperatures=temps, length_max_new_tokens=cfg.length_factor * protocol.max_new_tokens)
    study = run_training_audit(plan, args.out, exec_config=ExecConfig(max_batch_rows=args.max_batch_rows,
                                                                      device=args.device))
    html_path, md_path = write_report(study, args.out)
    print(text_summary(study))
    print(f"report: {html_path}\nsummary: {md_path}")


if __name__ == "__main__":
    main()
