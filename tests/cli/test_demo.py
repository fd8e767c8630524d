"""`reachlens demo`, the main job, end to end on the shipped zoo at a miniature size."""

from __future__ import annotations

import pytest

from reachlens.cli import main
from reachlens.models.zoo import zoo_entries
from reachlens.report.page import MARKDOWN_MARK
from reachlens.store import list_runs, read_run


def test_demo_audits_the_lineage_and_prints_every_table(tmp_path, capfd):
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out), "--n", "4", "--k", "4", "--extended-k", "8", "--workers", "2"]) == 0
    printed, err = capfd.readouterr()
    # one progress line per audit (a closing line where the output is no terminal), and nothing from the
    # libraries, the worker processes' included
    for name in ("base", "grpo", "dapo", "sft", "sft-grpo"):
        # decoded once at the budget control's K=8, the audit at K=4 its first 4 samples per question
        assert f"{name} K=8 (K=4 and the budget control): 4/4 questions in " in err
    # the GRPO run's snapshots: audited under the same protocol, without a budget control of their own
    snapshots = sorted((e for e in zoo_entries() if e.training.get("trajectory_of") == "grpo"),
                       key=lambda e: e.training["snapshot_step"])
    assert len(snapshots) >= 3
    for e in snapshots:
        assert f"{e.name} K=4: 4/4 questions in " in err and f"{e.name} K=8" not in err
    assert "sft in its 'verbose' prompt: 4/4 questions in " in err
    assert "Loading weights" not in err and "Warning" not in err, err
    assert f"report: {out / 'report.html'}" in printed
    for pair in ("base -> grpo", "base -> dapo", "base -> sft", "sft -> sft-grpo"):
        assert pair in printed
    for section in ("headline: realized", "headline: reachable", "checkpoints:", "pass@k crossovers:",
                    "pass@k differences:", "budget control:", "prompt-format control:", "temperature control:",
                    "unreachability bounds:", "truncation parity:", "length control:",
                    "trajectory: realization and reachability over training:"):
        assert section in printed, section
    # every headline delta with its interval and its tests, and the family the Holm adjustment corrects over
    assert "delta_D [95% CI]" in printed and "delta_O_K [95% CI]" in printed and "McNemar p" in printed
    assert "Holm p: adjusted over the 4 pairs of this study" in printed
    assert "2000 resamples" in printed
    study = read_run(out)
    lineage = {"base", "grpo", "dapo", "sft", "sft-grpo"}
    assert set(study.audits) == lineage | {e.name for e in snapshots}
    assert {name: r.k for name, r in study.extended.items()} == dict.fromkeys(lineage, 8)
    # the trajectory: base at step 0, each snapshot at its step, grpo at its last step, in order
    steps = {"base": 0, **{e.name: e.training["snapshot_step"] for e in snapshots},
             "grpo": next(e for e in zoo_entries() if e.name == "grpo").training["steps"]}
    assert study.plan.trajectory == steps
    t = study.trajectory()
    assert t["model"].tolist() == sorted(steps, key=steps.get) and t["step"].is_monotonic_increasing
    assert "Realization and reachability over training" in (out / "report.html").read_text()
    # the format control audits the models trained on "verbose" prompts in that format, and only them
    assert {name: r.protocol.prompt_format for name, r in study.formats.items()} == \
        {"sft": "verbose", "sft-grpo": "verbose"}
    assert {r.k for r in study.formats.values()} == {1}  # its table reads D alone: the deployment and one sample
    assert {r.protocol.prompt_format for r in study.audits.values()} == {"qa"}
    mark, title = (out / "report.md").read_text().split("\n", 2)[:2]  # reachlens' mark, then the page
    assert mark == MARKDOWN_MARK and title == "# Training audit"
    # the demo directory lists its audits, comparisons and controls, each a complete run
    found = list_runs(out)
    kinds = {i.kind for i in found}
    assert {"training_audit", "audit", "comparison"} <= kinds and ("temperature_control" in kinds) == bool(study.reprobes)
    assert all(i.record.status == "complete" for i in found)
    assert sum(i.kind == "comparison" for i in found) == 4
    # the temperature control re-probed every pair's left questions at the three temperatures
    for (a, b), c in study.comparisons().items():
        if c.summary()["left"]:
            assert set(study.reprobes[(a, b)]) == {0.6, 1.0, 1.2}
    # the hard tier by default, at its own decode length; the length control at twice that, capped by what the
    # zoo's 256-token context leaves after the longest prompt (one token per character)
    from reachlens.tasks import load_task

    assert study.plan.protocol.task == "arith_hard" and study.plan.protocol.max_new_tokens == 128
    task = load_task("arith_hard", n=4)
    longest = max(len(task.prompt(q, f)) for q in task.questions for f in ("qa", "verbose"))
    assert study.plan.length_max_new_tokens == min(2 * 128, 256 - longest) < 256


def test_demo_refuses_a_budget_control_below_k(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        raise SystemExit(main(["demo", "--out", str(tmp_path / "d"), "--k", "8", "--extended-k", "8"]))
    assert exc.value.code == 2
    assert "extended_k=8 must exceed the protocol's k=8" in capsys.readouterr().err
