"""When a row is finished: EOS, or its text contains a stop string.

Stop strings are matched on *text*, not tokens, so ``"\\n"`` stops a row whether the tokenizer
emits it alone or fused into ``"5\\n"``. Tokens whose own text contains a stop string are found once
per tokenizer and checked as a vectorized lookup; stop strings longer than one character can also
straddle tokens, so for those the last few tokens of each live row are decoded and searched.
The final text is cut before the first occurrence of any stop string (lm-eval's ``until``).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from jaxtyping import Bool, Int
from torch import Tensor

__all__ = ["StopChecker"]


class StopChecker:
    """Finds rows that just finished, for one tokenizer and one set of stop strings.

    >>> checker = StopChecker(tokenizer, stop=("\\n",), eos_ids={2})  # doctest: +SKIP
    """

    def __init__(self, tokenizer, stop: Iterable[str], eos_ids: Iterable[int]) -> None:
        self.tokenizer = tokenizer
        self.stop = tuple(stop)
        self.eos = torch.tensor(sorted(set(eos_ids)), dtype=torch.long)
        vocab = len(tokenizer)
        self.stop_token = torch.zeros(vocab, dtype=torch.bool)
        if self.stop:
            texts = tokenizer.batch_decode([[i] for i in range(vocab)], skip_special_tokens=True)
            hits = [i for i, t in enumerate(texts) if any(s in t for s in self.stop)]
            self.stop_token[hits] = True
        longest = max((len(s) for s in self.stop), default=0)
        self.window = longest + 1 if longest > 1 else 0

    def check(
        self, chosen: Int[Tensor, "batch"], history: Int[Tensor, "rows new"], rows: Int[Tensor, "batch"], step: int
    ) -> tuple[Bool[Tensor, "batch"], Bool[Tensor, "batch"]]:
        """(hit EOS, hit a stop string) for each batch row after it emitted ``chosen`` at ``step``.

        ``history[rows[b], :step + 1]`` holds batch row b's tokens so far (on the CPU).
        """
        chosen_cpu = chosen.cpu()
        eos = torch.isin(chosen_cpu, self.eos) if self.eos.numel() else torch.zeros_like(chosen_cpu, dtype=torch.bool)
        stop = self.stop_token[chosen_cpu.clamp(0, self.stop_token.shape[0] - 1)] & ~eos
        if self.window:
            todo = (~eos & ~stop).nonzero().flatten().tolist()
            if todo:
                lo = max(0, step + 1 - self.window)
                tails = history[rows[todo], lo : step + 1].tolist()
                texts = self.tokenizer.batch_decode(tails, skip_special_tokens=True)
                for b, t in zip(todo, texts):
                    if any(s in t for s in self.stop):
                        stop[b] = True
        return eos, stop

    def cut(self, text: str) -> str:
        """``text`` up to (not including) the first stop string."""
        cut = len(text)
        for s in self.stop:
            i = text.find(s)
            if i != -1:
                cut = min(cut, i)
        return text[:cut]
