"""Chat templates as a prompt format: each question rendered by the model's own chat template.

An instruct checkpoint is deployed behind its chat template, so its ``realized`` answer is the one it
gives to a chat turn. ``prompt_format="chat"`` (``--prompt-format chat``) makes the user turn the text
of the task's default prompt format (``chat:NAME``: of its format ``NAME``), after an optional system
turn (``Protocol.system``; None leaves the template's own default, e.g. Qwen2.5's "You are Qwen..."),
and renders it with the model's tokenizer: ``apply_chat_template(messages, add_generation_prompt=True)``.
The rendered text carries the template's own BOS text where it has one; the engine encodes it with
one BOS (:func:`reachlens.engine.tokens.encode_prompts`), so the ids are exactly
``apply_chat_template(..., tokenize=True)``'s.

The template is part of the protocol: :func:`bind_chat` records the SHA-256 of its text
(``Protocol.chat_template``) when the protocol meets the model, and every render checks it, so two
audits under different templates (or a chat audit and a plain one) are refused as a comparison unless
the difference is allowed.

>>> render_prompts(task, Protocol("arith", prompt_format="chat"), task.questions[:1], tokenizer)  # doctest: +SKIP
['<|im_start|>system\\nYou are Qwen, ...<|im_end|>\\n<|im_start|>user\\nQ: 3+4=?\\nA:<|im_end|>\\n<|im_start|>assistant\\n']
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence
from typing import TYPE_CHECKING

from reachlens.errors import ReachlensError
from reachlens.protocol import CHAT, chat_inner
from reachlens.tasks.base import Question, Task

if TYPE_CHECKING:
    from reachlens.protocol import Protocol

__all__ = ["CHAT", "bind_chat", "chat_inner", "render_prompts", "template_hash", "template_text"]

def template_text(tokenizer) -> str | None:
    """The chat template ``tokenizer`` ships (its ``default`` one when it names several), or None."""
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):
        template = template.get("default")
    return template if isinstance(template, str) and template else None


def template_hash(text: str) -> str:
    """``sha256:`` and 16 hex digits of a chat template's text: its identity in a protocol."""
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()[:16]


def bind_chat(protocol: Protocol, tokenizer, *, model: str = "the model") -> Protocol:
    """``protocol`` with the hash of ``tokenizer``'s chat template when its prompt format is a chat one.

    Refused: a model without a chat template, and a protocol already bound to another template.
    A plain format is returned as it is.
    """
    from reachlens.protocol import ProtocolMismatch

    if chat_inner(protocol.prompt_format) is None:
        return protocol
    text = template_text(tokenizer)
    if text is None:
        raise ReachlensError(
            f"{model} has no chat template, so prompt_format={protocol.prompt_format!r} cannot render its "
            "prompts; use a plain prompt format (prompt_format='default') or a model that ships a chat template"
        )
    digest = template_hash(text)
    if protocol.chat_template is not None and protocol.chat_template != digest:
        raise ProtocolMismatch({"chat_template": (protocol.chat_template, digest)},
                               "the model's chat template is not the protocol's",
                               "audit this model into a new directory (out=)")
    return dataclasses.replace(protocol, chat_template=digest)


def render_prompts(task: Task, protocol: Protocol, questions: Sequence[Question], tokenizer=None, *,
                   history: Sequence[Sequence[dict[str, str]]] | None = None) -> list[str]:
    """The prompt of each question under ``protocol.prompt_format``: the task's template, or for a chat
    format that text as the user turn of ``tokenizer``'s chat template (checked against the protocol's),
    after ``history[i]``'s turns where given (few-shot demonstrations: :mod:`reachlens.tasks.fewshot`)."""
    inner = chat_inner(protocol.prompt_format)
    if inner is None and history is not None:
        raise ReachlensError(f"history= holds earlier chat turns, but prompt_format={protocol.prompt_format!r} is plain")
    if inner is None:
        fmt = task.format(protocol.prompt_format)
        return [fmt.render(q) for q in questions]
    if tokenizer is None:
        raise ReachlensError(f"prompt_format={protocol.prompt_format!r} renders with the model's tokenizer; "
                             "none was given")
    protocol = bind_chat(protocol, tokenizer)
    fmt = task.format(inner or None)
    head = [] if protocol.system is None else [{"role": "system", "content": protocol.system}]
    from jinja2.exceptions import TemplateError

    out = []
    for i, q in enumerate(questions):
        messages = [*head, *(history[i] if history is not None else ()), {"role": "user", "content": fmt.render(q)}]
        try:
            out.append(tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True))
        except TemplateError as err:  # the template's own raise_exception (e.g. "System role not supported")
            fix = "drop system=" if protocol.system is not None else "use a plain prompt_format"
            raise ReachlensError(f"the model's chat template refuses the prompt ({err}); {fix}") from None
    return out
