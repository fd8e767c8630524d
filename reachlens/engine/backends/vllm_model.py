"""The vLLM backend: an audit's completions drawn by vLLM, for audits without hooks.

How it runs: :class:`VLLMModel` starts :mod:`~reachlens.engine.backends.vllm_worker` as a child
process under a python that has vLLM, and talks to it over pipes (JSON lines; no socket of its
own). That python is ``python=``, else ``$REACHLENS_VLLM_PYTHON``, else this interpreter:

* on a GPU machine, ``pip install 'reachlens[vllm]'`` puts vLLM beside reachlens and nothing needs
  setting;
* on a CPU machine, vLLM's CPU build wants transformers < 5.20 and a hand-written install, so it
  lives in a venv of its own (``make .venv-vllm/.installed``; ``REACHLENS_VLLM_PYTHON=.venv-vllm/bin/python``).
  The worker imports only vLLM and the standard library, so reachlens need not be installed there.

What it maps (the same :class:`~reachlens.protocol.Protocol` as the engine): each row is one vLLM
request with ``n=1``; the deployed answer is greedy (``temperature=0``); sample j of question q is
``SamplingParams(temperature=T, top_p=p, max_tokens=L, stop=S, seed=row_seed(seed, q, j))``, so a
sample is repeatable and an audit extends from K to 2K by drawing samples K..2K-1 only. Prompts
go in as the token ids reachlens encodes (:func:`~reachlens.engine.tokens.encode_prompts`), and the
text comes back decoded by reachlens from vLLM's token ids, cut where the engine stops (a stop string on
the byte that completes it, one that is a special token's text on that token's id, also handed to vLLM as a
stop token id: vLLM's own stop check reads text without special tokens) and at the first stop string, as
the engine does; log-probabilities are vLLM's raw (untempered) ones, as the engine reports.

What it does not do: hooks. vLLM runs no TransformerLens hooks, so :meth:`VLLMModel.hooks` refuses
naming the hooks asked for, and an audit asking for ``backend="vllm"`` with a hooked TransformerBridge
is refused naming the hooks attached (:func:`~reachlens.engine.backends.bind_backend`).

Network: the worker's environment gets ``VLLM_HOST_IP=127.0.0.1`` (else vLLM opens a socket toward a
public resolver to learn its address), ``VLLM_NO_USAGE_STATS=1`` and ``DO_NOT_TRACK=1``, unless set.
"""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
import tempfile
import threading
import weakref
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from reachlens.engine.generate import Completion, Row
from reachlens.engine.stopping import StopChecker
from reachlens.engine.tokens import special_ids, encode_prompts
from reachlens.errors import ReachlensError
from reachlens.protocol import Protocol

__all__ = ["VLLMModel", "WORKER_ENV", "vllm_python"]

WORKER_ENV = {"VLLM_HOST_IP": "127.0.0.1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1",
              "VLLM_CPU_KVCACHE_SPACE": "1"}
"""Set in the worker's environment unless the caller's environment sets them."""
_INSTALL = ("install vLLM: on a GPU machine `pip install 'reachlens[vllm]'`; on a CPU machine `make "
            ".venv-vllm/.installed` and REACHLENS_VLLM_PYTHON=.venv-vllm/bin/python (see docs/scale.md)")


def vllm_python() -> str:
    """The python that runs the vLLM worker: ``$REACHLENS_VLLM_PYTHON``, else this interpreter."""
    return os.environ.get("REACHLENS_VLLM_PYTHON") or sys.executable


class VLLMModel:
    """A model served by vLLM in a worker process; :func:`reachlens.audit` takes it like a TransformerBridge.

    Made by :func:`reachlens.models.load_vllm`, which resolves the spec to its folder (``target``) and gives the
    model its identity and the source a worker reloads it from.

    >>> model = load_vllm("zoo:base")  # doctest: +SKIP
    >>> reachlens.audit(model, task, Protocol("arith", k=200))  # doctest: +SKIP  (backend 'vllm')
    """

    reachlens_backend = "vllm"

    def __init__(self, spec: str, *, target: str, identity: Any, source: Any, dtype: str = "float32",
                 python: str | None = None, max_model_len: int | None = None,
                 options: dict[str, Any] | None = None) -> None:
        from transformers import AutoConfig, AutoTokenizer, GenerationConfig

        self.reachlens_identity = identity
        self.reachlens_source = source
        self.tokenizer = AutoTokenizer.from_pretrained(target)
        config = AutoConfig.from_pretrained(target)
        n_ctx = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
        self.cfg = SimpleNamespace(n_ctx=n_ctx, dtype=dtype, device="vllm", model_name=spec)
        self._eos = {self.tokenizer.eos_token_id} - {None}
        try:
            eos = GenerationConfig.from_pretrained(target).eos_token_id
            self._eos |= set(eos if isinstance(eos, (list, tuple)) else [eos]) - {None}
        except OSError:
            pass  # no generation_config.json
        self.python = python or vllm_python()
        self._log = Path(tempfile.mkstemp(prefix="reachlens-vllm-", suffix=".log")[1])
        self._lock = threading.Lock()
        env = {**WORKER_ENV, **os.environ}
        worker = Path(__file__).with_name("vllm_worker.py")
        with open(self._log, "wb") as log:
            try:
                self._proc = subprocess.Popen([self.python, "-P", str(worker)], stdin=subprocess.PIPE,
                                              stdout=subprocess.PIPE, stderr=log, env=env, text=True)
            except OSError as err:
                raise ReachlensError(f"cannot start the vLLM worker with {self.python!r} ({err}); {_INSTALL}") from None
        weakref.finalize(self, _stop, self._proc)
        atexit.register(_stop, self._proc)
        reply = self._ask({"model": target, "tokenizer": target, "dtype": dtype,
                           "max_model_len": int(max_model_len or n_ctx), "options": dict(options or {})})
        self.vllm_version = reply.get("vllm")

    def _ask(self, message: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            if self._proc.poll() is not None:
                raise ReachlensError(f"the vLLM worker has exited (code {self._proc.returncode}); its log: {self._log}")
            self._proc.stdin.write(json.dumps(message) + "\n")
            self._proc.stdin.flush()
            line = self._proc.stdout.readline()
        if not line:
            raise ReachlensError(f"the vLLM worker ({self.python}) died: {self._tail()} (log: {self._log})")
        reply = json.loads(line)
        if "error" in reply:
            fix = _INSTALL if "No module named 'vllm'" in reply["error"] else f"its log: {self._log}"
            raise ReachlensError(f"the vLLM worker ({self.python}) failed: {reply['error']}; {fix}")
        return reply

    def _tail(self) -> str:
        lines = self._log.read_text(errors="replace").strip().splitlines()
        return lines[-1] if lines else "no output"

    def generate_rows(self, prompts: Sequence[str], rows: Sequence[Row], protocol: Protocol) -> list[Completion]:
        """One :class:`Completion` per row, decoded by ``protocol`` (length, temperature, top-p, stop
        strings): greedy for ``seed=None``, else a sample seeded by the row's seed. Rows with an arm
        (an intervention) are refused: vLLM runs no hooks."""
        armed = [r.arm for r in rows if r.arm is not None]
        if armed:
            raise ReachlensError(f"the vLLM backend runs no interventions, but rows carry arm {armed[0]!r}; decode "
                                 "arms on the engine (reachlens.load_model, backend 'engine')")
        ids = encode_prompts(self.tokenizer, prompts)  # a ChatPrompt: the template's ids, one BOS, as the engine's
        stop = tuple(protocol.stop or ())
        specials = special_ids(self.tokenizer)
        reply = self._ask({
            "prompts": ids, "requests": [{"prompt": r.prompt, "seed": r.seed} for r in rows],
            "max_tokens": protocol.max_new_tokens, "temperature": protocol.temperature, "top_p": protocol.top_p,
            "stop": list(stop), "stop_token_ids": sorted({specials[s] for s in stop if s in specials}),
        })
        stopper = StopChecker(self.tokenizer, stop, self._eos)
        return [self._completion(stopper, out) for out in reply["outputs"]]

    def _completion(self, stopper: StopChecker, out: dict[str, Any]) -> Completion:
        """One vLLM output as the engine's :class:`Completion`: its tokens cut where the engine stops
        (:meth:`~reachlens.engine.stopping.StopChecker.first_stop`: EOS, a special token's text on its id, a stop
        string on the byte that completes it), so a stop vLLM's text check finds late, or not at all, is the
        engine's; else vLLM's own reason."""
        tokens, logprobs = [int(t) for t in out["token_ids"]], list(out["logprobs"])
        first = stopper.first_stop(tokens)
        if first is not None:
            end, reason = first
            tokens, logprobs = tokens[:end + 1], logprobs[:end + 1]
        elif out["finish_reason"] == "length":
            reason = "length"
        elif out["stop_reason"] is None or (isinstance(out["stop_reason"], int) and out["stop_reason"] in self._eos):
            reason = "eos"  # vLLM's EOS, or an EOS id of the generation config it stopped on
        else:
            reason = "stop"
        shown = tokens[:-1] if reason == "eos" and tokens and tokens[-1] in self._eos else tokens
        text = stopper.cut(self.tokenizer.decode(shown, skip_special_tokens=True))
        return Completion(text, tuple(tokens), reason, tuple(logprobs))

    def hooks(self, fwd_hooks=(), bwd_hooks=(), **_):
        """Refused: vLLM runs no TransformerLens hooks."""
        names = [name if isinstance(name, str) else getattr(name, "__name__", repr(name))
                 for name, _fn in [*fwd_hooks, *bwd_hooks]]
        raise ReachlensError(f"the vLLM backend runs no TransformerLens hooks (asked for: {', '.join(names) or 'none'}); "
                             "load the model with reachlens.load_model (backend 'engine') to audit with hooks")

    def close(self) -> None:
        """Stop the worker (also done when the model is garbage-collected or Python exits)."""
        _stop(self._proc)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            proc.stdin.close()
            proc.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            proc.kill()
            proc.wait()
