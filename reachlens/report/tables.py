"""The tables of a study's report, formatted for reading: the same in the HTML page, its Markdown and
``reachlens demo``'s printout (:func:`display_tables`).

Every delta is shown with its paired 95 % bootstrap interval and its p-value, Holm-adjusted where a study
tests several pairs or ks at once, and each note says which family the adjustment corrects over.
"""

from __future__ import annotations

import math

import pandas as pd

from reachlens.escape import md_text
from reachlens.power import ALPHA, POWER, mde_verdict
from reachlens.records import markdown_table
from reachlens.stats import N_BOOT, N_PERM
from reachlens.studies.study_view import StudyView

__all__ = ["bins_table", "display_tables", "fmt", "fmt_p", "heading", "markdown_summary", "md_table", "report_title",
           "text_summary"]


def fmt(x) -> str:
    if isinstance(x, (bool,)):
        return "yes" if x else "no"
    if isinstance(x, float):
        return "undefined" if math.isnan(x) else f"{x:.3f}"
    return str(x)


def _ci(v: float, lo: float, hi: float, signed: bool = True) -> str:
    if any(math.isnan(x) for x in (v, lo, hi)):
        return "undefined"
    f = "+.3f" if signed else ".3f"
    return f"{v:{f}} [{lo:{f}}, {hi:{f}}]"


def _cis(df: pd.DataFrame, col: str, signed: bool = True) -> list[str]:
    """Column ``col`` of ``df`` with its interval (``col_lo``, ``col_hi``) as text, row by row."""
    return [_ci(*r, signed=signed) for r in df[[col, f"{col}_lo", f"{col}_hi"]].itertuples(index=False)]


def _seen(df: pd.DataFrame, col: str, mde: str | None = None, p: str | None = None) -> list[str]:
    """Each delta of column ``col`` beside the effect its test could detect (column ``mde``, by default
    ``col_mde``): "not detected; detectable at this n: >= X" when its interval (``col_lo``, ``col_hi``) holds 0,
    or when the p-value the table prints beside it (column ``p``, Holm-adjusted where the table adjusts) is not
    below alpha."""
    cols = [f"{col}_lo", f"{col}_hi", mde or f"{col}_mde"]
    ps = df[p] if p is not None else [None] * len(df)
    return [mde_verdict((lo, hi), m, q) for (lo, hi, m), q in zip(df[cols].itertuples(index=False), ps)]


DETECTABLE = f"detectable at this n ({POWER:.0%} power)"
"""The heading of the column that gives each delta's minimum detectable effect."""
MDE_NOTE = (f"{DETECTABLE}: the smallest change the delta's test detects with {POWER:.0%} power at two-sided "
            f"{ALPHA:g} at this n and the measured share of questions that changed (exact McNemar; Connor's normal "
            "approximation past 5,000 changed questions; a mean of per-question differences: the z test from their "
            "standard deviation), in either direction; when fewer questions changed than that, the smallest "
            "change made of questions all moving one way. A delta whose interval holds 0 is not detected: it rules "
            "out effects of that size, not smaller ones.")


def fmt_p(p: float) -> str:
    """A p-value with two significant digits (a permutation p of 1e-4 reads 0.0001, not 0.000)."""
    return "undefined" if math.isnan(p) else f"{p:.2g}"


def _pct(x: float) -> str:
    return "undefined" if math.isnan(x) else f"{x:.1%}"


def heading(title: str) -> str:
    """A table title as a heading: capitalized, except a leading name such as ``pass@k``."""
    return title if title.startswith("pass@k") else title[0].upper() + title[1:]


def md_table(df: pd.DataFrame) -> str:
    return markdown_table(df) + "\n"


CROSSOVER_NOTE = (
    "crossover_k: the budgets k at which trained - base pass@k changes sign (each the first k of the new "
    "sign); a trained model ahead at small k that the base overtakes at larger k reaches fewer questions "
    "than the base from that budget on. outside_noise: those crossovers whose new order holds beyond the paired "
    "95% bootstrap interval over questions of the difference at that k (the pass@k differences table has every k)."
)

FORMAT_CONTROL_NOTE = (
    "D_trained_shared is the descendant under the parent's prompt, D_trained_native under its own; "
    "gain_retained = (D_trained_shared - D_base) / (D_trained_native - D_base), the share of the native "
    "realization gain that survives the shared prompt (negative: the descendant does worse than its parent "
    "under the shared prompt; undefined: no native gain). D_base_in_native is the parent under the "
    "descendant's native prompt, where it was audited so: for a parent trained in that format itself the "
    "like-for-like gain is D_trained_native - D_base_in_native."
)


TRAJECTORY_NOTE = (
    "One training run's checkpoints by optimizer step, its parent at step 0, all under the study's protocol. "
    "D, O_K and maj_K (majority over the K samples, ties averaged): 95% Wilson intervals; selection gap "
    "O_K - maj_K: paired bootstrap 95% interval over questions; pass@k: unbiased estimator, mean over "
    "questions, 95% question-bootstrap interval. Each later step against step 0: paired 95% bootstrap interval over questions, exact McNemar p "
    "(D: gained vs lost; O_K: entered vs left), sign-flip p for pass@1; Holm: adjusted over the run's later "
    f"steps, one family per quantity; then whether it was detected and the smallest change detectable at this n "
    f"({POWER:.0%} power, two-sided {ALPHA:g}: exact McNemar for D and O_K, the z test of the mean difference for "
    "pass@1)."
)


def _headline(study: StudyView) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    h = study.headline()
    if h.empty:
        return h, h, h
    realized = pd.DataFrame({
        "pair": h["pair"], "D_base": h["D_base"], "D_trained": h["D_trained"],
        "delta_D [95% CI]": _cis(h, "delta_D"), DETECTABLE: _seen(h, "delta_D", p="p_realized_holm"),
        "gained": h["gained"], "lost": h["lost"], "McNemar p": h["p_realized"].map(fmt_p),
        "Holm p": h["p_realized_holm"].map(fmt_p), "gained from base-reachable": h["gained_from_base_reachable"],
    })
    bounds = study.unreachability().set_index("pair")["bound_max"]
    reachable = pd.DataFrame({
        "pair": h["pair"], "O_K_base": h["O_K_base"], "O_K_trained": h["O_K_trained"],
        "delta_O_K [95% CI]": _cis(h, "delta_O_K"), DETECTABLE: _seen(h, "delta_O_K", p="p_reachable_holm"),
        "entered": h["entered"], "left": h["left"], "McNemar p": h["p_reachable"].map(fmt_p),
        "Holm p": h["p_reachable_holm"].map(fmt_p),
        "left: per-sample rate below": [("-" if math.isnan(b) else f"{b:.4f}") for b in bounds.reindex(h["pair"])],
    })
    majority = pd.DataFrame({
        "pair": h["pair"], "maj_K_base": h["maj_K_base"], "maj_K_trained": h["maj_K_trained"],
        "delta_maj_K [95% CI]": _cis(h, "delta_maj_K"), DETECTABLE: _seen(h, "delta_maj_K", p="p_majority_holm"),
        "test": h["majority_test"],
        "p": h["p_majority"].map(fmt_p), "Holm p": h["p_majority_holm"].map(fmt_p),
    })
    return realized, reachable, majority


def _verified_headline(study: StudyView) -> pd.DataFrame:
    """Per pair, the deltas by verified solutions beside both lucky-guess nulls; "not trace-graded" where either
    audit has no trace table."""
    v = study.verified_headline()
    if v.empty:
        return v
    graded = v["delta_O_K_trace"].notna().to_numpy()

    def col(values) -> list[str]:
        return [x if g else "not trace-graded" for x, g in zip(values, graded)]

    return pd.DataFrame({
        "pair": v["pair"],
        "O_K lucky-guess null (base -> trained)": [f"{a:.3f} -> {b:.3f}" for a, b in
                                                   zip(v["O_K_null_base"], v["O_K_null_trained"])],
        "O_K^trace (base -> trained)": col(f"{a:.3f} -> {b:.3f}" for a, b in
                                           zip(v["O_K_trace_base"], v["O_K_trace_trained"])),
        "delta_O_K^trace [95% CI]": col(_cis(v, "delta_O_K_trace")),
        DETECTABLE: col(_seen(v, "delta_O_K_trace", p="p_O_K_trace_holm")),
        "entered, left": col(f"{a:g}, {b:g}" for a, b in zip(v["O_K_trace_entered"], v["O_K_trace_left"])),
        "McNemar p (O_K^trace)": col(v["p_O_K_trace"].map(fmt_p)),
        "Holm p (O_K^trace)": col(v["p_O_K_trace_holm"].map(fmt_p)),
        "D^trace (base -> trained)": col(f"{a:.3f} -> {b:.3f}" for a, b in zip(v["D_trace_base"], v["D_trace_trained"])),
        "delta_D^trace [95% CI]": col(_cis(v, "delta_D_trace")),
        "gained, lost": col(f"{a:g}, {b:g}" for a, b in zip(v["D_trace_gained"], v["D_trace_lost"])),
        "McNemar p (D^trace)": col(v["p_D_trace"].map(fmt_p)),
        "Holm p (D^trace)": col(v["p_D_trace_holm"].map(fmt_p)),
    })


VERIFIED_NOTE = (
    "By verified solutions (the task's trace grader, reachlens.grading.trace): a question counts for O_K^trace when "
    "one of its K samples has the right answer on a valid worked solution, for D^trace when the greedy deployment "
    "does. delta: paired bootstrap 95% interval over questions; McNemar p: exact test of entered vs left (gained vs "
    "lost); Holm p: adjusted over the trace-graded pairs. O_K lucky-guess null: O_K with each question's samples "
    "scored against the gold of another question of the same kind (mean over random derangements; the checkpoints "
    "table has its 95th percentile)."
)


def _verified(d: float, o: float, checkable: float) -> str:
    if o != o:
        return "not trace-graded"
    return f"{d:.3f}, {o:.3f} ({checkable:.0%})"


def _checkpoints(study: StudyView) -> pd.DataFrame:
    c = study.checkpoints()
    if c.empty:
        return c
    return pd.DataFrame({
        "model": c["model"], "n": c["n"],
        "D [95% Wilson]": _cis(c, "D", signed=False),
        "O_K [95% Wilson]": _cis(c, "O_K", signed=False),
        "maj_K [95% Wilson]": _cis(c, "maj_K", signed=False),
        "selection gap O_K - maj_K [95% CI]": _cis(c, "selection_gap"),
        "O_K lucky-guess null (95th pct)": [f"{m:.3f} ({p:.3f})" for m, p in zip(c["O_K_null"], c["O_K_null_p95"])],
        "D^trace, O_K^trace (checkable)": [_verified(d, o, x) for d, o, x in
                                           zip(c["D_trace"], c["O_K_trace"], c["checkable_share"])],
        "samples cut at max_new_tokens": c["truncated_samples"].map(_pct),
        "deployed cut at max_new_tokens": c["truncated_deployed"].map(_pct),
    })


def _pass_at_k_deltas(study: StudyView) -> pd.DataFrame:
    d = study.pass_at_k_deltas()
    if d.empty:
        return d
    return pd.DataFrame({
        "pair": d["pair"], "k": d["k"], "base": d["base"], "trained": d["trained"],
        "delta [95% CI]": _cis(d, "delta"), DETECTABLE: _seen(d, "delta", "mde", "p_holm"),
        "sign-flip p": d["p"].map(fmt_p), "Holm p (over the pair's ks)": d["p_holm"].map(fmt_p),
    })


def _trajectory(study: StudyView) -> pd.DataFrame:
    t = study.trajectory()
    if t.empty:
        return t
    k = study.protocol.k

    def delta(key: str) -> list[str]:
        return [("-" if math.isnan(r[f"{key}_p"]) else
                 f"{_ci(r[key], r[f'{key}_lo'], r[f'{key}_hi'])}, p {fmt_p(r[f'{key}_p'])} (Holm {fmt_p(r[f'{key}_p_holm'])}); "
                 f"{mde_verdict((r[f'{key}_lo'], r[f'{key}_hi']), r[f'{key}_mde'], r[f'{key}_p_holm'])}")
                for _, r in t.iterrows()]

    out = {"step": t["step"], "model": t["model"],
           "D [95% Wilson]": _cis(t, "D", signed=False),
           f"O_{k} [95% Wilson]": _cis(t, "O_K", signed=False),
           f"maj_{k} [95% Wilson]": _cis(t, "maj_K", signed=False),
           f"selection gap O_{k} - maj_{k} [95% CI]": _cis(t, "selection_gap")}
    for col in [c for c in t.columns if c.startswith("pass@") and c[5:].isdigit()]:
        out[f"{col} [95% CI]"] = _cis(t, col, signed=False)
    out["delta_D vs step 0"] = delta("delta_D")
    out[f"delta_O_{k} vs step 0"] = delta("delta_O_K")
    out["delta_pass@1 vs step 0"] = delta("delta_pass@1")
    return pd.DataFrame(out)


def _temperature(study: StudyView) -> pd.DataFrame:
    t = study.temperature_control()
    if t.empty:
        return t
    return pd.DataFrame({
        "pair": t["pair"], "temperature": t["temperature"].map(lambda x: f"{x:g}"), "source": t["source"],
        "left questions re-probed": t["n_reprobed"], "reachable again": t["n_reachable"],
        "share [95% Wilson]": _cis(t, "share", signed=False),
    })


def _truncation(study: StudyView) -> pd.DataFrame:
    t = study.truncation_control()
    if t.empty:
        return t
    return pd.DataFrame({
        "pair": t["pair"], "max_new_tokens": t["max_new_tokens"],
        "samples cut (base -> trained)": [f"{_pct(a)} -> {_pct(b)}" for a, b in zip(t["samples_base"], t["samples_trained"])],
        "samples gap (points)": (100 * t["samples_gap"]).map(lambda x: f"{x:+.1f}"),
        "deployed cut (base -> trained)": [f"{_pct(a)} -> {_pct(b)}" for a, b in zip(t["deployed_base"], t["deployed_trained"])],
        "deployed gap (points)": (100 * t["deployed_gap"]).map(lambda x: f"{x:+.1f}"),
        "flagged": t["flagged"].map(lambda f: "FLAGGED" if f else "no"),
    })


def _length(study: StudyView) -> pd.DataFrame:
    t = study.length_control()
    if t.empty:
        return t
    return pd.DataFrame({
        "pair": t["pair"], "max_new_tokens": t["max_new_tokens"],
        "samples cut (base -> trained)": [f"{_pct(a)} -> {_pct(b)}" for a, b in
                                          zip(t["truncated_samples_base"], t["truncated_samples_trained"])],
        "delta_D [95% CI]": _cis(t, "delta_D"),
        "McNemar p (D)": t["mcnemar_realized_p"].map(fmt_p),
        "delta_O_K [95% CI]": _cis(t, "delta_O_K"),
        "McNemar p (O_K)": t["mcnemar_reachable_p"].map(fmt_p),
    })


def _as_text(df: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame({c: [fmt(v) for v in df[c]] for c in df.columns}) if len(df) else df


def display_tables(study: StudyView) -> list[tuple[str, pd.DataFrame, str]]:
    """``(title, table, note)`` for every table of the report, formatted for reading (strings). Audits without
    a pair (one audit's report) leave out the tables that read a pair, and the budget control unless it ran."""
    tables = _tables(study)
    if not study.comparisons():
        kept = {"checkpoints"} | ({"budget control"} if study.extended else set())
        tables = [t for t in tables if t[0] in kept or t[0].startswith("trajectory")]
    return [(title, _as_text(df), note) for title, df, note in tables]


def _tables(study: StudyView) -> list[tuple[str, pd.DataFrame, str]]:
    plan = study.plan
    n_pairs = len(study.comparisons())
    realized, reachable, majority = _headline(study)
    temps = ", ".join(f"{t:g}" for t in plan.control_temperatures)
    length_note = (
        f"A pair is flagged when its shares of outputs cut at max_new_tokens differ by more than "
        f"{100 * plan.truncation_margin:g} points (samples or deployed); "
        + (f"flagged pairs are audited again at max_new_tokens={plan.length_max_new_tokens} (length control)."
           if plan.length_max_new_tokens else "this study runs no length control (`reachlens control length` does).")
    )
    length = _length(study)
    if length.empty and plan.length_max_new_tokens:
        length_note_2 = "No pair was flagged, so nothing was rerun at a longer decode."
    else:
        length_note_2 = ("Each flagged pair at the audits' length, then at the longer one: if the deltas hold, "
                         "truncation does not explain them.")
    return [
        ("headline: realized (D, greedy deployment)", realized,
         f"delta_D: paired bootstrap 95% interval over questions ({N_BOOT} resamples, seed 0). McNemar p: exact "
         f"two-sided test of gained vs lost. Holm p: adjusted over {study.holm_family}. {MDE_NOTE}" if n_pairs else ""),
        (f"headline: reachable (O_K, K={study.protocol.k} samples)", reachable,
         "delta_O_K: paired bootstrap 95% interval. McNemar p: exact test of entered vs left, Holm-adjusted as above. "
         "left: the questions that left the reachable set have 0 correct of K samples after training; each one's "
         "per-sample success rate lies below 1 - 0.05^(1/K) (one-sided 95%, about 3/K); the column gives the "
         "largest such bound of the pair (the unreachability bounds table has their distribution)." if n_pairs else ""),
        (f"headline: majority vote (maj_K, K={study.protocol.k} samples)", majority,
         "maj_K: the majority answer of the K samples, a tie counted as the mean correctness of the tied answers "
         "(its expectation under a random tie-break). delta_maj_K: paired bootstrap 95% interval. test: exact "
         "McNemar of the questions majority gained vs lost when every majority is 0 or 1, else (fractional ties) "
         "the two-sided sign-flip test of the per-question differences; Holm-adjusted over the pairs."
         if n_pairs else ""),
        ("headline: verified solutions (O_K^trace, D^trace) and the lucky-guess null", _verified_headline(study),
         VERIFIED_NOTE if n_pairs else ""),
        ("checkpoints", _checkpoints(study),
         f"D, O_K and maj_K with 95% Wilson score intervals; selection gap O_K - maj_K: what K samples reach but "
         f"majority does not select, with its paired bootstrap 95% interval over questions ({N_BOOT} resamples)."),
        *([("trajectory: realization and reachability over training", _trajectory(study), TRAJECTORY_NOTE)]
          if plan.trajectory else []),
        ("pass@k crossovers", study.pass_at_k_crossovers(), CROSSOVER_NOTE),
        ("pass@k differences", _pass_at_k_deltas(study),
         f"delta: mean over questions of the per-question difference of unbiased pass@k, with its paired bootstrap "
         f"95% interval ({N_BOOT} resamples); sign-flip p: two-sided permutation test of that mean "
         f"(exact up to {N_PERM.bit_length() - 1} non-zero differences, else {N_PERM} random sign flips, so the smallest "
         f"p it reports is {1 / (N_PERM + 1):.1g}); Holm p: adjusted over the ks of the pair. {DETECTABLE}: the "
         f"smallest mean difference the z test detects with {POWER:.0%} power at two-sided {ALPHA:g}, from the "
         "standard deviation of the per-question differences at that k."),
        ("budget control", study.budget_control(), "O_K and O_2K from the same seed stream."),
        ("prompt-format control", study.format_control(), FORMAT_CONTROL_NOTE),
        ("temperature control", _temperature(study),
         f"The questions that left the reachable set (base-reachable, trained-unreachable at T="
         f"{study.protocol.temperature:g}) re-probed with the descendant at T = {temps}, same K, same seed stream. "
         "A share near 0 at every temperature: the answer is gone, not merely cooled out of reach."
         if plan.control_temperatures else "This study runs no temperature control (`reachlens control temperature` does)."),
        ("unreachability bounds", study.unreachability(),
         "Per pair, the questions that left the reachable set and the distribution of their one-sided 95% upper "
         "bounds on the descendant's per-sample success rate (0 of n graded samples correct: 1 - 0.05^(1/n))."),
        ("truncation parity", _truncation(study), length_note),
        ("length control", length, length_note_2),
    ]


def text_summary(study: StudyView) -> str:
    """Every table of the report as plain text (what ``reachlens demo`` prints)."""
    parts = []
    for title, df, note in display_tables(study):
        parts.append(f"{title}:\n" + (df.to_string(index=False) if len(df) else "(none)") + (f"\n{note}" if note else ""))
    return "\n\n".join(parts)


def report_title(study: StudyView) -> str:
    """The report's title: ``Training audit`` for checkpoints in pairs, ``Audit of MODEL`` for one audit alone."""
    if study.plan.pairs or len(study.audits) != 1:
        return "Training audit"
    (name, result), = study.audits.items()
    return f"Audit of {result.model.get('spec', name)}"


def markdown_summary(study: StudyView) -> str:
    p = study.protocol
    m = md_text
    parts = [
        f"# {m(report_title(study))}", "",
        f"Task {m(p.task)} ({m(p.split)}), K={m(p.k)} samples at T={m(p.temperature)}, top-p {m(p.top_p)}, "
        f"{m(p.max_new_tokens)} new tokens, prompt format {m(p.prompt_format)}, grader {m(p.grader)}, seed {m(p.seed)} "
        f"(protocol {m(p.hash)}).", "",
    ]
    for title, df, note in display_tables(study):
        parts += [f"## {m(heading(title))}", "", md_table(df)] + ([m(note), ""] if note else [])
    if not study.comparisons():
        return "\n".join(parts)
    parts += ["## Propensity bins (base-reachable, base-unrealized questions)", "",
              "rate: realized after training, with its 95% Wilson interval.", ""]
    for (a, b), c in study.comparisons().items():
        parts += [f"### {m(a)} -> {m(b)}", "", md_table(bins_table(c.propensity_bins()))]
    return "\n".join(parts)


def bins_table(df: pd.DataFrame) -> pd.DataFrame:
    """Propensity bins (:func:`~reachlens.studies.compare.propensity_bins`) for reading."""
    return pd.DataFrame({"bin": df["bin"], "n": df["n"], "realized_after": df["realized_after"],
                         "rate [95% Wilson]": _cis(df, "rate", signed=False)})


