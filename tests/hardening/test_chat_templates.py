"""A chat template is data: it renders under a time and memory bound, any failure is one line, and a template
whose output lacks the question is refused (issue 36, third pass, finding 5).

Before: a nested ``range(100000)`` loop hung (> 70 s), ``{{ 'x' * 3000000000 }}`` exhausted memory,
``include``/``import``/recursion were tracebacks, and a template that drops the user's content
(``<|im_start|>assistant\\n``) was accepted: every question got the same prompt and D measured nothing. Now a
template renders once in a child process (``reachlens/tasks/_template_core.py``) under ``RENDER_SECONDS`` and
``RENDER_MEMORY``, with placeholders for the turns' contents, and each prompt is that rendering with the
contents put in (so a template never sees the data it could branch on).
"""

from __future__ import annotations

import shutil

import pytest
from hostile import error_line

from reachlens import Protocol
from reachlens.errors import ReachlensError
from reachlens.tasks import load_task, render_prompts

LAST = "{{ messages[-1]['content'] }}"
FAILING = {
    "nested loop": ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}" + LAST,
                    "took longer than 2 s"),
    "huge string": ("{{ 'x' * 3000000000 }}" + LAST, "needed more than"),
    "huge list": ("{{ (range(100000) | list) * 100000 }}" + LAST, "needed more than"),
    "include": ("{% include 'other.jinja' %}" + LAST, "no loader"),
    "import": ("{% import 'macros.jinja' as m %}" + LAST, "no loader"),
    "recursion": ("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}" + LAST, "recurses without end"),
    "its own refusal": ("{{ raise_exception('line one\\nline two') }}", "TemplateError: line one line two"),
    "a syntax error": ("{% for %}", "TemplateSyntaxError"),
}


def _tokenizer(template: str):
    from reachlens.models.char_tokenizer import build_char_tokenizer

    tok = build_char_tokenizer("0123456789+-=?\n QA:")
    tok.chat_template = template
    return tok


def _render(template: str, *, system: str | None = None, n: int = 2) -> list[str]:
    task = load_task("arith", n=n)
    protocol = Protocol("arith", prompt_format="chat", system=system).resolved(task)
    return render_prompts(task, protocol, task.questions, _tokenizer(template))


@pytest.mark.parametrize("name", list(FAILING))
def test_a_template_that_cannot_render_is_one_line(name, monkeypatch) -> None:
    import reachlens.tasks.chat as chat

    monkeypatch.setattr(chat, "RENDER_SECONDS", 2.0)  # the bound itself, short for the test
    template, says = FAILING[name]
    with pytest.raises(ReachlensError) as err:
        _render(template)
    line = str(err.value)
    assert "\n" not in line and line.startswith("the model's chat template cannot render the prompt: "), line
    assert says in line and line.endswith("use a plain prompt_format (prompt_format='default')"), line


@pytest.mark.parametrize("template, says", [
    ("<|im_start|>assistant\n", "without the question (every question would get the same prompt)"),
    ("{{ messages[-1]['content'] | upper }}", "without the question"),
    ("{{ messages[-1]['content'][:3] }}", "without the question"),
])
def test_a_template_whose_output_lacks_the_question_is_refused(template, says) -> None:
    with pytest.raises(ReachlensError, match=r"renders a prompt without") as err:
        _render(template)
    assert says in str(err.value)


def test_a_template_that_drops_the_system_turn_is_refused() -> None:
    with pytest.raises(ReachlensError, match="without the system turn; drop system="):
        _render(LAST, system="Answer with a number.")


def test_a_template_that_changes_a_turn_beyond_trimming_is_refused() -> None:
    with pytest.raises(ReachlensError, match="changes the text of a turn"):
        _render("{{ messages[-1]['content'] | replace(' ', '  ') }}")


@pytest.mark.parametrize("template", [
    "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}</{{ m['role'] }}>{% endfor %}<assistant>",
    "{% for m in messages %}[{{ m['role'] }}]{{ m['content'] | trim }}\n{% endfor %}[assistant]",
])
@pytest.mark.parametrize("system", [None, "  Answer with a number. \n"])
def test_a_well_made_template_renders_as_apply_chat_template_does(template, system) -> None:
    """The reference: HuggingFace's own rendering of each question's messages (trimmed where the template
    trims), with no placeholder in the way."""
    task = load_task("arith", n=3)
    tok = _tokenizer(template)
    prompts = render_prompts(task, Protocol("arith", prompt_format="chat", system=system).resolved(task),
                             task.questions, tok)
    head = [] if system is None else [{"role": "system", "content": system}]
    for q, prompt in zip(task.questions, prompts):
        ref = tok.apply_chat_template([*head, {"role": "user", "content": task.prompt(q)}],
                                      add_generation_prompt=True, tokenize=False)
        assert str(prompt) == ref


def test_the_cli_refuses_a_hostile_template_in_one_line_before_writing(tmp_path, capsys) -> None:
    """A model folder whose chat template hangs: ``reachlens audit --prompt-format chat`` refuses in one line
    and creates nothing."""
    from hostile import cli

    from reachlens.models.zoo import zoo_root

    model = shutil.copytree(zoo_root() / "base", tmp_path / "model")
    (model / "chat_template.jinja").write_text("{{ 'x' * 3000000000 }}" + LAST)
    code, _, err = cli(capsys, "audit", model, "--task", "arith", "--n", "1", "--k", "1", "--temperature", "0",
                       "--max-new-tokens", "2", "--prompt-format", "chat", "--out", tmp_path / "run")
    assert code == 2 and "the model's chat template cannot render the prompt" in error_line(err)
    assert not (tmp_path / "run").exists()
