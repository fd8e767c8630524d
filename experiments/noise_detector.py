"""Tice et al.'s weight-noise detector on the zoo's lock, with its null (issue 57, item 7).

    python experiments/noise_detector.py --organism zoo:locked=/work/noise/locked-s0 \
        --null zoo:locked-twin='/work/noise/locked-twin-s*' --null zoo:base='/work/noise/base-s*'

Each directory is a `reachlens probe` run with one weight-noise probe (the same sigma grid and draws in every run,
a different ``seed=`` per run of a model): see /work/noise/run.sh for the commands. The organism's statistic is
its best single noised model over the whole grid minus its clean D; the null is that statistic on never-locked
models under at least 5 noise seeds each (:mod:`reachlens.probes.noise_detector`). Prints every run's best draw,
the null's gains and 95th percentile, and the verdict.
"""

from __future__ import annotations

import argparse
import glob
import sys

from reachlens import read_run
from reachlens.probes.noise_detector import best_draw, calibrate, detect


def _runs(spec: str) -> list:
    model, sep, pattern = spec.partition("=")
    paths = sorted(glob.glob(pattern))
    if not sep or not paths:
        raise SystemExit(f"{spec!r}: needs MODEL=GLOB matching probe run directories")
    out = []
    for path in paths:
        run = read_run(path)
        (probe,) = [p for p in run.probes if p.startswith("weight_noise")]
        seed = int(probe.rsplit("seed=", 1)[1].split(":")[0]) if "seed=" in probe else 0
        out.append(best_draw(run.candidates, probe, model=model, seed=seed))
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--organism", required=True, help="MODEL=DIR of the organism's probe run")
    p.add_argument("--null", action="append", required=True, help="MODEL=GLOB of a never-locked model's runs")
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    organism = _runs(args.organism)[0]
    runs = [r for spec in args.null for r in _runs(spec)]
    for r in [organism, *runs]:
        print(f"{r.model:>18s} seed {r.seed}: clean D {r.clean:.3f}, best draw {r.best:.3f} ({r.best_arm}), "
              f"gain {r.gain:+.3f}, phi {r.phi:.2f}")
    null = calibrate(runs)
    verdict = detect(organism, null)
    print(f"null: {len(null.gains)} gains, {null.q:.0%} quantile {null.threshold:+.3f}; organism gain "
          f"{organism.gain:+.3f}: {'FLAGGED' if verdict.flagged else 'not flagged'} (rank p {verdict.p:.3f})")


if __name__ == "__main__":
    main()
