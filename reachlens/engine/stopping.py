"""When a row is finished: EOS, or the text it generated contains a stop string, matched on bytes.

A stop fires on the step whose token completes it, whatever the tokenization: a stop string is
matched on the UTF-8 *bytes* each token adds to the text, so a character the tokenizer splits into
byte tokens (an emoji, ``"答案："`` on GPT-2; Gemma's ``<0xF0>`` byte-fallback pieces) and a stop
spread over several BPE tokens complete on their last byte. The text matched is lm-eval's
(``until``, checked on the decoded text *with* special tokens): a stop that is a special token's text
(``<|im_end|>`` on a Qwen2.5 base model, ``<|eot_id|>``) fires on that token's id. The text a
:class:`~reachlens.engine.Completion` reports leaves special tokens out (``skip_special_tokens``) and is
cut before the first stop string (:meth:`StopChecker.cut`).

Per tokenizer, the bytes of every token id are computed once (:func:`token_bytes`, cached for the
life of the tokenizer object), and per set of stop strings two lookup tables over the vocabulary
(:func:`stop_table`, cached too): which tokens contain a whole stop string, and which tokens can
*end* one that began in earlier tokens (the token's first bytes are a proper suffix of a stop).
Each step costs one vectorized lookup per row; only rows whose token can end a stop read back
their last few tokens' bytes. Text clean-up a tokenizer applies after decoding
(``clean_up_tokenization_spaces``, a ``Strip`` decoder) is not part of the bytes matched.
"""

from __future__ import annotations

import json
import re
import weakref
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from jaxtyping import Bool
from torch import Tensor

from reachlens.engine.host_reads import to_host

__all__ = ["StopChecker", "StopTable", "stop_table", "token_bytes"]

_BYTES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
"""tokenizer -> (its length when built, the bytes of each token id)."""
_TABLES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
"""tokenizer -> {stop strings: StopTable}."""
_BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")
_NOT_IN_ALPHABET = re.compile("[\x00-\x20\x7f-\xa0\xad\u0144-\U0010ffff]")
"""Characters outside GPT-2's byte-level alphabet (which uses the printable latin-1 ones and U+0100-U+0143)."""


def _byte_level_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet inverted: the character a byte-level BPE piece uses -> the byte."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[chr(b)] = b
        else:
            chars[chr(256 + extra)] = b
            extra += 1
    return chars


def _decoder_steps(tokenizer) -> list[dict] | None:
    """The ``tokenizers`` decoder of ``tokenizer`` as a flat list of steps (None: no such backend)."""
    decoder = getattr(getattr(tokenizer, "backend_tokenizer", None), "decoder", None)
    if decoder is None:
        return None if getattr(tokenizer, "backend_tokenizer", None) is None else []
    spec = json.loads(decoder.__getstate__())
    return list(spec.get("decoders") or []) if spec.get("type") == "Sequence" else [spec]


def _piece_bytes(pieces: list[str], steps: list[dict]) -> list[bytes] | None:
    """Each piece's bytes under a byte-level or a byte-fallback decoder (None: another decoder)."""
    kinds = {s.get("type") for s in steps}
    if "ByteLevel" in kinds:
        # the alphabet's characters are one byte each (latin-1 once translated); a piece with other
        # characters (an added token's own text) is that text's UTF-8
        to_byte = str.maketrans({c: chr(b) for c, b in _byte_level_decoder().items()})
        return [p.encode() if _NOT_IN_ALPHABET.search(p) else p.translate(to_byte).encode("latin-1") for p in pieces]
    if not kinds <= {"Replace", "ByteFallback", "Fuse", "Strip", "Metaspace"}:
        return None
    replace = [(s["pattern"]["String"], s["content"]) for s in steps
               if s.get("type") == "Replace" and "String" in (s.get("pattern") or {})]
    if "Metaspace" in kinds:
        replace.append(("▁", " "))
    out = []
    for p in pieces:
        m = _BYTE_PIECE.fullmatch(p) if "ByteFallback" in kinds else None
        if m:
            out.append(bytes([int(m.group(1), 16)]))
            continue
        for old, new in replace:
            p = p.replace(old, new)
        out.append(p.encode())
    return out


def _build_token_bytes(tokenizer) -> tuple[bytes, ...]:
    """The bytes each token id adds to the decoded text (special tokens: their own text)."""
    n = len(tokenizer)
    steps = _decoder_steps(tokenizer)
    out = None
    if steps is not None:
        pieces = tokenizer.convert_ids_to_tokens(list(range(n)))
        out = _piece_bytes([p if isinstance(p, str) else "" for p in pieces], steps)
    if out is None:  # another decoder: each token decoded alone (whole characters only)
        out = [t.encode() for t in tokenizer.batch_decode([[i] for i in range(n)], skip_special_tokens=False,
                                                          clean_up_tokenization_spaces=False)]
    return tuple(out)


def token_bytes(tokenizer) -> tuple[bytes, ...]:
    """The UTF-8 bytes each token id of ``tokenizer`` adds to its decoded text, special tokens
    included as their own text; computed once per tokenizer object (and again if tokens are added).

    >>> b"".join(token_bytes(tok)[i] for i in tok("😀 hi")["input_ids"]).decode()  # doctest: +SKIP
    '😀 hi'
    """
    cached = _BYTES.get(tokenizer)
    if cached is None or cached[0] != len(tokenizer):
        cached = (len(tokenizer), _build_token_bytes(tokenizer))
        _BYTES[tokenizer] = cached
        _TABLES.pop(tokenizer, None)
    return cached[1]


@dataclass(frozen=True)
class StopTable:
    """Per token id, for one tokenizer and one set of stop strings (as UTF-8 bytes)."""

    stops: tuple[bytes, ...]
    pieces: tuple[bytes, ...]
    """Each token's bytes (:func:`token_bytes`)."""
    contains: Bool[Tensor, "vocab"]
    """The token's bytes contain a whole stop string."""
    may_end: Bool[Tensor, "vocab"]
    """The token's first bytes are a proper suffix of a stop string: it can complete one begun before it."""
    longest: int
    """Bytes of the longest stop string."""
    contains_host: np.ndarray
    """:attr:`contains` as a numpy array (the same memory), for the host's stop check."""
    may_end_host: np.ndarray
    """:attr:`may_end` as a numpy array (the same memory)."""

    def completes(self, before: list[int], token: int) -> bool:
        """Whether ``token`` completes a stop string after the tokens ``before`` (oldest first)."""
        tail = self.pieces[token] if 0 <= token < len(self.pieces) else b""
        need = self.longest - 1 + len(tail)
        text = tail
        for t in reversed(before):
            if len(text) >= need:
                break
            text = (self.pieces[t] if 0 <= t < len(self.pieces) else b"") + text
        return any(s in text for s in self.stops)


def _occurrences(haystack: bytes, needle: bytes) -> np.ndarray:
    """Every start position of ``needle`` in ``haystack``, overlapping ones included."""
    return np.fromiter((m.start() for m in re.finditer(b"(?=" + re.escape(needle) + b")", haystack)), dtype=np.int64)


def _build_stop_table(pieces: tuple[bytes, ...], stops: tuple[bytes, ...]) -> StopTable:
    # search the whole vocabulary at once: the pieces end to end, then map each hit to its token
    whole = b"".join(pieces)
    ends = np.cumsum([len(p) for p in pieces], dtype=np.int64)
    starts = ends - np.fromiter((len(p) for p in pieces), dtype=np.int64, count=len(pieces))
    contains = np.zeros(len(pieces), dtype=bool)
    may_end = np.zeros(len(pieces), dtype=bool)
    for s in stops:
        at = _occurrences(whole, s)
        tok = np.searchsorted(ends, at, side="right")  # the (non-empty) token holding each hit's first byte
        contains[tok[at + len(s) <= ends[tok]]] = True
        for m in range(1, len(s)):  # tokens that begin with the stop's last m bytes
            at = _occurrences(whole, s[len(s) - m:])
            tok = np.searchsorted(ends, at, side="right")
            may_end[tok[(starts[tok] == at) & (at + m <= ends[tok])]] = True
    return StopTable(stops, pieces, torch.from_numpy(contains), torch.from_numpy(may_end), max(len(s) for s in stops),
                     contains, may_end)


def stop_table(tokenizer, stop: Iterable[str]) -> StopTable:
    """The lookup tables of ``stop`` over ``tokenizer``'s vocabulary, built once per (tokenizer, stops).

    >>> stop_table(tok, ("\\n",)).contains[tok.convert_tokens_to_ids("Ċ")]  # doctest: +SKIP
    tensor(True)
    """
    key = tuple(sorted(set(stop)))
    if not key:
        raise ValueError("stop_table needs at least one stop string")
    pieces = token_bytes(tokenizer)
    per_tok = _TABLES.setdefault(tokenizer, {})
    if key not in per_tok:
        per_tok[key] = _build_stop_table(pieces, tuple(s.encode() for s in key))
    return per_tok[key]


class StopChecker:
    """Finds rows that just finished, for one tokenizer and one set of stop strings.

    >>> checker = StopChecker(tokenizer, stop=("\\n",), eos_ids={2})  # doctest: +SKIP
    """

    def __init__(self, tokenizer, stop: Iterable[str], eos_ids: Iterable[int]) -> None:
        self.tokenizer = tokenizer
        self.stop = tuple(stop)
        self.eos = torch.tensor(sorted(set(eos_ids)), dtype=torch.long)
        self._eos_host = np.array(sorted(set(eos_ids)), dtype=np.int64)
        self.table = stop_table(tokenizer, self.stop) if self.stop else None

    def check(
        self, chosen: np.ndarray, history: np.ndarray, rows: np.ndarray, step: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """(hit EOS, hit a stop string) for each batch row after it emitted ``chosen`` at ``step``.

        ``history[rows[b], :step + 1]`` holds batch row b's tokens so far. Host arrays (numpy; a tensor is read once):
        the decoder decides stops from its one copy of the step's tokens.
        """
        chosen, history, rows = to_host(chosen), to_host(history), to_host(rows)
        eos = np.isin(chosen, self._eos_host)
        if self.table is None:
            return eos, np.zeros_like(eos)
        t = self.table
        known = (chosen >= 0) & (chosen < t.contains_host.shape[0])
        ids = np.where(known, chosen, 0)
        stop = t.contains_host[ids] & known & ~eos
        todo = np.flatnonzero(t.may_end_host[ids] & known & ~eos & ~stop).tolist()
        if todo:
            look = t.longest  # tokens to read back (a token is at least one byte; a longer read if not)
            lo = max(0, step - look)
            tokens = chosen.tolist()
            for b, before in zip(todo, history[rows[todo], lo:step].tolist()):
                if lo and len(b"".join(t.pieces[i] for i in before if 0 <= i < len(t.pieces))) < look:
                    before = history[rows[b], :step].tolist()
                if t.completes(before, tokens[b]):
                    stop[b] = True
        return eos, stop

    def first_stop(self, tokens: Sequence[int]) -> tuple[int, str] | None:
        """Where the engine stops a row that emitted ``tokens``: (index of the token it stops on, ``"eos"`` or
        ``"stop"``), or None when none of them ends it. What a backend that decodes by itself (vLLM) cuts its
        tokens at, so a stop fires on the same step as in the engine (a special token's text on its id, a
        byte-split stop string on its last byte).

        >>> checker.first_stop([40, 11, 2, 7])  # doctest: +SKIP
        (2, 'eos')
        """
        eos = set(self._eos_host.tolist())
        t = self.table
        for i, token in enumerate(tokens):
            if token in eos:
                return i, "eos"
            if t is not None and 0 <= token < t.contains.shape[0] and (
                    bool(t.contains[token]) or (bool(t.may_end[token]) and t.completes(list(tokens[:i]), token))):
                return i, "stop"
        return None

    def cut(self, text: str) -> str:
        """``text`` up to (not including) the first stop string."""
        cut = len(text)
        for s in self.stop:
            i = text.find(s)
            if i != -1:
                cut = min(cut, i)
        return text[:cut]
