"""Writes notebooks/training_audit.ipynb (outputs stripped). Run: python notebooks/_build_training_audit.py"""

import nbformat as nbf

cells = [
    nbf.v4.new_markdown_cell(
        "# The training audit on the zoo\n\n"
        "A benchmark gain conflates *can now* with *now does*. This notebook audits the zoo's base model and its "
        "GRPO descendant under one protocol, joins them question by question, and looks at which questions "
        "training converted. It uses a small protocol (20 questions, K=16) so that it runs in about a minute on a CPU; "
        "`make demo` runs the full study (n=300, K=200, budget control at 400)."),
    nbf.v4.new_code_cell(
        "import reachlens\n"
        "from reachlens import Protocol\n"
        "from reachlens.studies import compare\n"
        "from reachlens.report import accuracy_bars, fate_bars, pass_at_k_delta_figure, pass_at_k_figure, propensity_figure\n\n"
        "task = reachlens.load_task('arith', split='test', n=20)\n"
        "protocol = Protocol('arith', k=16, temperature=0.8, max_new_tokens=96)\n"
        "audits = {name: reachlens.audit(reachlens.load_model(f'zoo:{name}'), task, protocol) for name in ['base', 'grpo']}\n"
        "{name: (round(r.D, 3), round(r.O_K, 3)) for name, r in audits.items()}"),
    nbf.v4.new_markdown_cell("Each audit keeps every raw sample, so it can be re-scored without sampling:"),
    nbf.v4.new_code_cell("audits['base'].samples.head()"),
    nbf.v4.new_markdown_cell(
        "## The join\n\nEvery question gets a realized fate (kept / gained / lost / never) and a reach fate "
        "(kept / entered / left / never). The key number: how many newly realized questions the base could already reach."),
    nbf.v4.new_code_cell(
        "cmp = compare(audits['base'], audits['grpo'])\n"
        "summary = cmp.summary()\n"
        "assert summary['gained'] - summary['lost'] == cmp.questions['trained_realized'].sum() - cmp.questions['base_realized'].sum()\n"
        "{k: summary[k] for k in ['D_base', 'D_trained', 'O_K_base', 'O_K_trained', 'gained', 'lost', 'gained_from_base_reachable', 'entered', 'left']}"),
    nbf.v4.new_markdown_cell(
        "## Is it noise?\n\nEach delta comes with its test: the exact McNemar p of the discordant counts behind it "
        "(gained vs lost, entered vs left) and a paired bootstrap interval over questions (2,000 resamples). "
        "A question that left the reachable set has 0 of K samples correct: its per-sample rate is below "
        "1 - 0.05^(1/K), about 3/K, and no more can be said at this budget."),
    nbf.v4.new_code_cell(
        "{k: summary[k] for k in ['delta_D', 'delta_D_ci', 'mcnemar_realized_p', 'delta_O_K', 'delta_O_K_ci', "
        "'mcnemar_reachable_p', 'left_bound', 'bootstrap_resamples']}"),
    nbf.v4.new_code_cell("cmp.fate_counts()"),
    nbf.v4.new_code_cell("fate_bars({('base', 'grpo'): cmp})"),
    nbf.v4.new_code_cell("accuracy_bars(audits)"),
    nbf.v4.new_markdown_cell(
        "## Propensity\n\nAmong questions the base could reach but did not realize: the base model's per-question "
        "sample hit rate, binned, against realization after training."),
    nbf.v4.new_code_cell("bins = cmp.propensity_bins()\npropensity_figure({'base → grpo': bins})"),
    nbf.v4.new_markdown_cell(
        "## pass@k\n\nThe unbiased estimator at k = 1, 2, 4, ..., K. Where the two curves change order, the chart "
        "marks the crossing: a trained model ahead at small k that the base overtakes at larger k reaches fewer "
        "questions than the base from that budget on."),
    nbf.v4.new_code_cell(
        "print('crossovers at k =', cmp.crossovers())\n"
        "pass_at_k_figure(audits, {'base / grpo': ('base', 'grpo', cmp.crossovers())})"),
    nbf.v4.new_markdown_cell(
        "The difference at every k with its paired interval (band), a sign-flip p and that p Holm-adjusted over the ks:"),
    nbf.v4.new_code_cell("curve = cmp.pass_at_k_curve()\ndisplay(curve)\npass_at_k_delta_figure({'base → grpo': curve})"),
    nbf.v4.new_markdown_cell(
        "## Budget control\n\nSample j of a question depends only on (seed, question, j), so an audit extends from K to 2K "
        "without redrawing its first K samples."),
    nbf.v4.new_code_cell(
        "bigger = {n: reachlens.rerun(audits[n], model=reachlens.load_model(f'zoo:{n}'), task=task, k=32) for n in audits}\n"
        "assert bigger['base'].restrict_k(16).samples['text'].tolist() == audits['base'].samples['text'].tolist()\n"
        "{n: (round(audits[n].O_K, 3), round(bigger[n].O_K, 3)) for n in audits}"),
    nbf.v4.new_markdown_cell(
        "## Prompt-format control\n\nThe zoo's SFT model learned from traces that come in their own prompt format "
        "(`verbose`: spaces around every symbol). Under the base's prompt it looks destroyed; under its own it is not. "
        "Both audits are of the same model; only the prompt differs: the second is the first rerun with one field "
        "changed."),
    nbf.v4.new_code_cell(
        "sft = reachlens.load_model('zoo:sft')\n"
        "sft_shared = reachlens.audit(sft, task, protocol)\n"
        "sft_native = reachlens.rerun(sft_shared, model=sft, task=task, prompt_format='verbose')\n"
        "{'base, qa': audits['base'].D, 'sft, qa (shared)': sft_shared.D, 'sft, verbose (native)': sft_native.D}"),
    nbf.v4.new_markdown_cell(
        "A question-by-question join across the two prompts would compare different probes, so `compare` refuses it "
        "and names the field:"),
    nbf.v4.new_code_cell(
        "from reachlens import ProtocolMismatch\n"
        "try:\n"
        "    compare(audits['base'], sft_native)\n"
        "except ProtocolMismatch as err:\n"
        "    print(err)"),
    nbf.v4.new_markdown_cell(
        "## Temperature control\n\nUnder the shared prompt SFT loses most of what the base could reach. Would those "
        "answers come back at another temperature? The questions that left the reachable set are re-probed with "
        "the SFT model at each temperature, same K, same seed stream:"),
    nbf.v4.new_code_cell(
        "from reachlens.studies.controls import temperature_control\n"
        "temperature_control(sft, task, audits['base'], sft_shared, (0.6, 1.2))"),
]
nb = nbf.v4.new_notebook(cells=cells, metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})
nbf.write(nb, "notebooks/training_audit.ipynb")
