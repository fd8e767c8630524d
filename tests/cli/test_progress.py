"""A long decode's progress moves (issue 53, finding 2).

Before: ``reachlens audit`` on SmolLM2-135M with every question in one batch showed ``0/20 [00:03<?, ?q/s]`` for
11 minutes, then ``20/20`` at once (the bar counted finished questions), and ``reachlens route`` printed nothing
through its base decode. Now the line moves with every step of the engine: tokens decoded, rows finished, the rate
and the time the decode has left. The step time is stubbed (each engine step takes 10 s of a fake clock), so a tiny
model's run looks like a real checkpoint's to the progress line, and the log (not a terminal) gets a plain line
every 30 s of that work: the first before any question has finished.
"""

from __future__ import annotations

import io
import re

from progress_clock import slow_steps  # noqa: F401  (the fixture)

from reachlens.cli.main import main


def _lines(err: str) -> list[str]:
    return [ln for ln in err.splitlines() if ln.startswith("audit ") or ln.startswith("route ")]


def test_audit_progress_moves_before_the_first_question_finishes(tiny_dir, tmp_path, capfd, slow_steps):
    code = main(["audit", str(tiny_dir), "--task", "arith", "--n", "4", "--k", "4", "--temperature", "1",
                 "--max-new-tokens", "12", "--out", str(tmp_path / "a")])
    out, err = capfd.readouterr()
    assert code == 0, err
    lines = _lines(err)
    early = [ln for ln in lines if ": 0/4 q" in ln]
    assert early, lines  # a line while no question had finished
    tokens = [int(re.search(r"([\d,]+) tokens", ln).group(1).replace(",", "")) for ln in early]
    assert tokens[0] > 0 and tokens == sorted(tokens)
    assert "tok/s" in early[0] and "decode left <= " in early[0]
    assert re.match(rf"audit {re.escape(str(tiny_dir))}: 4/4 q, [\d,]+ tokens, 20/20 rows done", lines[-1]), lines
    assert max(tokens) <= int(re.search(r"([\d,]+) tokens", lines[-1]).group(1).replace(",", "")) <= 20 * 12


def test_a_progress_line_on_a_terminal_is_redrawn_in_place():
    from reachlens.cli._progress import RunProgress

    class Tty(io.StringIO):
        def isatty(self):
            return True

    now = [0.0]
    stream = Tty()
    with RunProgress("audit m", "q", stream=stream, clock=lambda: now[0]) as bar:
        bar.decode(10, 100)
        for _ in range(5):
            now[0] += 1.0
            bar.step(10, 0, 0)
        now[0] += 1.0
        bar.step(10, 10, 940)  # every row stopped early: the budget they freed leaves the estimate
        bar.done(2, 2)
    text = stream.getvalue()
    assert text.count("\n") == 1 and text.endswith("\n") and "\r" in text
    last = text.rsplit("\r", 1)[1]
    assert last.startswith("audit m: 2/2 q, 60 tokens, 10/10 rows done, 10 tok/s, decode left <= 0:00")


def test_the_line_gives_the_runs_eta_from_the_units_finished_in_this_process():
    """A resumed run (100 of 300 done before) that finishes 20 more questions in 60 s has 180 left at 3 s each:
    ETA 9:00, not the rate of the 120 it reports as done."""
    from reachlens.cli._progress import RunProgress

    now = [0.0]
    stream = io.StringIO()
    with RunProgress("audit m", "q", stream=stream, clock=lambda: now[0], every=1) as bar:
        bar.done(100, 300)
        assert "ETA" not in bar.line()  # nothing finished here yet: no rate to go on
        now[0] += 60.0
        bar.done(120, 300)
        assert bar.line() == "audit m: 120/300 q, 1:00 elapsed, ETA 9:00"
        now[0] += 1.0
        bar.done(300, 300)
        assert "ETA" not in bar.line()  # done
