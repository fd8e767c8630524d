"""Ship a finished LoRA adapter beside the zoo: ``reachlens/assets/real/NAME`` with its card, measured by an audit.

    python experiments/real/ship_adapter.py --adapter /work/i54-train/grpo/adapter \\
        --audit runs/real/grpo-easy --name smollm2-135m-instruct-grpo

``--audit`` is an audit of the adapter itself (``reachlens audit /work/i54-train/grpo/adapter --task ...
--prompt-format chat --out DIR``, complete, its model's fingerprint the adapter's: checked). The folder gets the
adapter's ``adapter_config.json``, ``adapter_model.safetensors`` and ``training.json`` as trained, ``card.json``
(the audit's D, O_K, their intervals, n, K, protocol and the audit's command) and ``MODEL_CARD.md`` (the command,
seed, steps, reward or loss curve, measured D); ``load_model("real:NAME")`` then loads it on its base.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FILES = ("adapter_config.json", "adapter_model.safetensors", "training.json")


def curve(training: dict) -> str:
    """The reward curve (GRPO) or the loss curve (SFT) as a Markdown table, about 15 rows."""
    if training.get("reward_curve"):
        rows, label = training["reward_curve"], "reward"
    else:
        rows, label = [(r["step"], r["loss"]) for r in training.get("log", []) if "loss" in r], "loss"
    every = max(1, len(rows) // 15)
    return f"| step | {label} |\n|---|---|\n" + "\n".join(f"| {s} | {v:.3f} |" for s, v in rows[::every])


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--adapter", required=True, help="the finished adapter folder (grpo_lora.py / sft_lora.py --out)")
    ap.add_argument("--audit", required=True, help="a complete audit of that adapter")
    ap.add_argument("--name", required=True, help="its real:NAME (a folder of reachlens/assets/real)")
    args = ap.parse_args(argv)

    from reachlens import read_run
    from reachlens.models import model_identity

    adapter, dest = Path(args.adapter), REPO / "reachlens" / "assets" / "real" / args.name
    run = read_run(args.audit)
    if run.record.status != "complete":
        raise SystemExit(f"--audit {args.audit!r} is {run.record.status}, not complete")
    if run.model.get("fingerprint") != model_identity(str(adapter)).fingerprint:
        raise SystemExit(f"--audit {args.audit!r} audited {run.model.get('spec')!r}, not the adapter {str(adapter)!r}")
    training = json.loads((adapter / "training.json").read_text())
    s, p = run.summary(), run.protocol
    task = p.task
    extra = {key: s[key] for key in ("D_trace", "O_K_trace", "O_K_null", "O_K_null_p95") if key in s}
    card = {"audits": {task: {"D": s["D"], "D_ci": s["D_ci"], "O_K": s["O_K"], "O_K_ci": s["O_K_ci"], "k": s["k"],
                              "n": s["n"], **extra, "protocol": p.to_dict(),
                              "command": " ".join(run.record.command or ())}}}
    dest.mkdir(parents=True, exist_ok=True)
    for name in FILES:
        shutil.copy2(adapter / name, dest / name)
    (dest / "card.json").write_text(json.dumps(card, indent=2, sort_keys=True) + "\n")
    (dest / "MODEL_CARD.md").write_text(
        f"# real:{args.name}\n\n{training['recipe'].upper()} LoRA adapter (rank {training['lora_rank']}) on "
        f"`{training['parent']}`, trained here.\n\n"
        f"- command: `{training['command']}`\n- seed: {training['seed']}\n- steps: {training['steps']}\n"
        f"- data: {training['train_task']}\n\n## Measured\n\n"
        f"D {s['D']:.3f} [{s['D_ci'][0]:.3f}, {s['D_ci'][1]:.3f}], O_{s['k']} {s['O_K']:.3f} on {task} (n = {s['n']}, "
        f"chat format), by `{card['audits'][task]['command']}`\n\n## Training curve\n\n{curve(training)}\n")
    print(f"shipped {dest}")


if __name__ == "__main__":
    main()
