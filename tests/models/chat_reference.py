"""Greedy chat text two ways: reachlens' engine on a loaded model, and plain HuggingFace ``generate``."""

from __future__ import annotations

import torch


def engine_chat_greedy(model, task, max_new_tokens: int) -> list[str]:
    """The deployed (greedy, chat format, to EOS) text of each of ``task``'s questions, decoded by the engine."""
    from reachlens.engine import generate
    from reachlens.engine.generate import Row
    from reachlens.protocol import Protocol
    from reachlens.tasks.chat import render_prompts

    protocol = Protocol(task.name, k=1, temperature=0.0, max_new_tokens=max_new_tokens, prompt_format="chat",
                        stop=()).resolved(task)
    prompts = render_prompts(task, protocol, task.questions, model.tokenizer)
    out = generate(model, prompts, [Row(i) for i in range(len(prompts))], protocol)
    return [c.text for c in out]


def hf_chat_greedy(hf, tokenizer, task, max_new_tokens: int) -> list[str]:
    """The same with ``hf.generate(do_sample=False)`` on the chat template's ids, one question at a time."""
    texts = []
    for q in task.questions:
        ids = tokenizer.apply_chat_template([{"role": "user", "content": task.prompt(q)}], add_generation_prompt=True,
                                            return_tensors="pt", return_dict=True)["input_ids"]
        with torch.no_grad():
            out = hf.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=max_new_tokens,
                              eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
        texts.append(tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True))
    return texts
