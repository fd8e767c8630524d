"""Chat templates as a prompt format: each question rendered by the model's own chat template.

An instruct checkpoint is deployed behind its chat template, so its ``realized`` answer is the one it
gives to a chat turn. ``prompt_format="chat"`` (``--prompt-format chat``) makes the user turn the text
of the task's default prompt format (``chat:NAME``: of its format ``NAME``), after an optional system
turn (``Protocol.system``; None leaves the template's own default, e.g. Qwen2.5's "You are Qwen..."),
and renders it with the model's tokenizer: ``apply_chat_template(messages, add_generation_prompt=True)``.
The rendered text carries the template's own BOS text where it has one; the engine encodes it with
one BOS (:func:`reachlens.engine.tokens.encode_prompts`), so the ids are exactly
``apply_chat_template(..., tokenize=True)``'s.

The template and every turn's text are data. A template renders in a child process under a time and
memory bound (:data:`RENDER_SECONDS`, :data:`RENDER_MEMORY`; any failure is one line), once per template,
with a placeholder for each turn's content; each prompt is that rendering with the turns' contents put in
as they are (or trimmed, where the template trims them), a :class:`~reachlens.engine.tokens.ChatPrompt` that
knows which spans the template wrote. So a template never sees the data (it cannot branch on it), a
special token's text inside a question or a system turn is encoded as text (no forged turn), and a template
whose output lacks the question (every question the same prompt: D would measure nothing), drops the system
turn, or changes a turn's text beyond trimming it is refused. The result equals
``apply_chat_template(messages, add_generation_prompt=True)`` for every question free of special-token text.

The template is part of the protocol: :func:`bind_chat` records the SHA-256 of its text
(``Protocol.chat_template``) when the protocol meets the model, and every render checks it, so two
audits under different templates (or a chat audit and a plain one) are refused as a comparison unless
the difference is allowed.

>>> render_prompts(task, Protocol("arith", prompt_format="chat"), task.questions[:1], tokenizer)  # doctest: +SKIP
['<|im_start|>system\\nYou are Qwen, ...<|im_end|>\\n<|im_start|>user\\nQ: 3+4=?\\nA:<|im_end|>\\n<|im_start|>assistant\\n']
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import re
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from reachlens.engine.tokens import ChatPrompt, Prompt
from reachlens.errors import ReachlensError
from reachlens.protocol import CHAT, chat_inner
from reachlens.tasks.base import Question, Task

if TYPE_CHECKING:
    from reachlens.protocol import Protocol

__all__ = [
    "CHAT", "RENDER_MEMORY", "RENDER_SECONDS", "bind_chat", "chat_inner", "render_prompts", "template_hash",
    "template_text",
]

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
    """The prompt of each question under ``protocol.prompt_format``: the task's template (a
    :class:`~reachlens.engine.tokens.Prompt`: its text is data, for the engine and ``model.to_tokens``), or for a chat
    format that text as the user turn of ``tokenizer``'s chat template (checked against the protocol's), a
    :class:`~reachlens.engine.tokens.ChatPrompt` whose turns' contents are data, after ``history[i]``'s turns
    where given (few-shot demonstrations: :mod:`reachlens.tasks.fewshot`)."""
    inner = chat_inner(protocol.prompt_format)
    if inner is None and history is not None:
        raise ReachlensError(f"history= holds earlier chat turns, but prompt_format={protocol.prompt_format!r} is "
                             "plain; use prompt_format='chat'")
    if inner is None:
        fmt = task.format(protocol.prompt_format)
        return [Prompt(fmt.render(q)) for q in questions]
    if tokenizer is None:
        raise ReachlensError(f"prompt_format={protocol.prompt_format!r} renders with the model's tokenizer; "
                             "none was given")
    protocol = bind_chat(protocol, tokenizer)
    fmt = task.format(inner or None)
    head = () if protocol.system is None else ({"role": "system", "content": protocol.system},)
    template, kwargs = template_text(tokenizer), _template_kwargs(tokenizer)
    out = []
    for i, q in enumerate(questions):
        turns = (*head, *(history[i] if history is not None else ()), {"role": "user", "content": fmt.render(q)})
        pieces = _skeleton(template, kwargs, tuple(t["role"] for t in turns))
        out.append(_fill(pieces, [t["content"] for t in turns]))
    return out


def _mark(i: int) -> str:
    """The placeholder turn ``i``'s content renders as (private-use characters: no template writes them)."""
    return f"\U000f0010reachlens-turn-{i}\U000f0011"


def _padded(i: int) -> str:
    """The same with whitespace around it: what a template that trims its turns drops."""
    return f" \n{_mark(i)}\n "


def _template_kwargs(tokenizer) -> str:
    """The variables ``apply_chat_template`` gives a template besides the messages (the special tokens' text), as
    JSON."""
    kwargs = {}
    for key, value in dict(getattr(tokenizer, "special_tokens_map", None) or {}).items():
        kwargs[key] = [str(v) for v in value] if isinstance(value, (list, tuple)) else str(value)
    return json.dumps(kwargs, sort_keys=True)


def _missing(roles: tuple[str, ...], i: int) -> str:
    """The one line refusing a template whose rendering drops turn ``i`` of ``roles``."""
    if roles[i] == "system":
        what, fix = "the system turn", "drop system="
    elif i == len(roles) - 1:
        what, fix = "the question (every question would get the same prompt)", \
            "use a plain prompt_format (prompt_format='default')"
    else:
        what, fix = f"an earlier {roles[i]} turn (a demonstration)", "use a plain prompt_format (prompt_format='default')"
    return f"the model's chat template renders a prompt without {what}; {fix}, or a model whose template renders it"


@functools.lru_cache(maxsize=64)
def _skeleton(template: str, kwargs: str, roles: tuple[str, ...]) -> tuple[tuple[str | int, str], ...]:
    """What ``template`` renders around the turns' contents for a conversation of ``roles``: pieces
    ``("text", TEXT)`` the template wrote and ``(I, "as is" | "trimmed")`` where turn ``I``'s content goes,
    rendered once (bounded) with placeholders."""
    bare, padded = _render_bounded(template, kwargs, [[{"role": r, "content": _mark(i)} for i, r in enumerate(roles)],
                                                      [{"role": r, "content": _padded(i)} for i, r in enumerate(roles)]],
                                   "system" in roles)
    for i in range(len(roles)):
        if _mark(i) not in bare:
            raise ReachlensError(_missing(roles, i))
    ways = ["as is" if _padded(i) in padded else "trimmed" for i in range(len(roles))]
    expect = bare
    for i, how in enumerate(ways):
        expect = expect.replace(_mark(i), _padded(i)) if how == "as is" else expect
    if expect != padded:
        raise ReachlensError("the model's chat template changes the text of a turn (more than trimming it), so "
                             "the question cannot be put in as it is; use a plain prompt_format "
                             "(prompt_format='default')")
    marks = {_mark(i): i for i in range(len(roles))}
    split = re.split("(" + "|".join(map(re.escape, marks)) + ")", bare)
    return tuple((marks[p], ways[marks[p]]) if p in marks else ("text", p) for p in split if p)


def _fill(pieces: tuple[tuple[str | int, str], ...], contents: Sequence[str]) -> ChatPrompt:
    """The prompt of ``pieces`` with each turn's content put in (trimmed where the template trims it)."""
    text, spans = [], []
    at = 0
    for kind, value in pieces:
        piece = value if kind == "text" else contents[kind].strip() if value == "trimmed" else contents[kind]
        if kind == "text":
            spans.append((at, at + len(piece)))
        text.append(piece)
        at += len(piece)
    return ChatPrompt("".join(text), spans)


RENDER_SECONDS = 20.0
"""Seconds a chat template may take to render (it renders once per template and process)."""
RENDER_MEMORY = 1 << 30
"""Bytes a chat template may allocate while it renders."""
RENDER_CHARS = 1 << 20
"""Characters a chat template's rendering may hold."""
_CORE = str(Path(__file__).with_name("_template_core.py"))
_START_SECONDS = 120.0
"""Time the child process has to import transformers' chat-template module before rendering starts."""


def _render_bounded(template: str, kwargs: str, conversations: list[list[dict]], system: bool) -> list[str]:
    """``template`` rendered for each conversation in a child process (:mod:`reachlens.tasks._template_core`)
    under :data:`RENDER_SECONDS` and :data:`RENDER_MEMORY`; any failure is one line."""
    request = {"template": template, "kwargs": json.loads(kwargs), "conversations": conversations,
               "seconds": RENDER_SECONDS, "memory": RENDER_MEMORY, "max_chars": RENDER_CHARS}
    fix = "use a plain prompt_format (prompt_format='default')" + (" or drop system=" if system else "")
    try:
        done = subprocess.run([sys.executable, "-P", _CORE], input=json.dumps(request), capture_output=True,
                              text=True, timeout=_START_SECONDS + RENDER_SECONDS)
        reply = json.loads(done.stdout) if done.returncode == 0 else {
            "error": f"its renderer was stopped ({_stopped(done.returncode)})"}
    except subprocess.TimeoutExpired:
        reply = {"error": f"it took longer than {RENDER_SECONDS:g} s to render"}
    except ValueError:
        reply = {"error": "its renderer sent no reply"}
    error = reply.get("error") or next((item["error"] for item in reply["rendered"] if "error" in item), None)
    if error is not None:  # e.g. the template's own raise_exception ("System role not supported")
        raise ReachlensError(f"the model's chat template cannot render the prompt: {error}; {fix}")
    return [item["text"] for item in reply["rendered"]]


def _stopped(returncode: int) -> str:
    """Why the renderer ended with ``returncode``: a signal's name, or the status."""
    if returncode < 0:
        try:
            return f"{signal.Signals(-returncode).name}: past its time or memory bound"
        except ValueError:
            pass
    return f"exit status {returncode}"
