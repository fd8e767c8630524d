"""``load_model(spec)``: a HuggingFace causal LM as a TransformerLens 4 ``TransformerBridge``.

``spec`` is one of

* ``zoo:NAME``: a checkpoint shipped in ``reachlens/assets/zoo/NAME`` (see :mod:`reachlens.models.zoo`);
* a local folder in HuggingFace format (``config.json``, ``*.safetensors``, tokenizer files);
* a HuggingFace hub name such as ``Qwen/Qwen2.5-7B`` (needs the weights in the local cache or a network).

All three go through the same code: ``AutoModelForCausalLM.from_pretrained(..., use_safetensors=True)``
and ``TransformerBridge.boot_transformers(..., hf_model=...)``. Weights are read from safetensors only
(a folder with only pickle weights is refused, since unpickling runs code), and remote code runs only when
the caller passes ``trust_remote_code=True``.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

import torch

__all__ = ["load_model", "ModelIdentity", "model_identity", "resolve_spec", "ModelLoadError"]

PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".ckpt")


class ModelLoadError(ValueError):
    """A model spec that cannot be loaded; the message says why and what to do."""


@dataclass(frozen=True)
class ModelIdentity:
    """What a stored result records about the model that made it."""

    spec: str
    """The spec as the user gave it (``zoo:base``, a path, a hub name)."""
    fingerprint: str
    """Content hash of the config and weights (sizes plus head and tail bytes of each file)."""


def _zoo_root() -> Path:
    """``$REACHLENS_ZOO``, else the zoo shipped as package data (``reachlens/assets/zoo``, in a wheel too)."""
    env = os.environ.get("REACHLENS_ZOO")
    return Path(env) if env else Path(__file__).resolve().parents[1] / "assets" / "zoo"


def resolve_spec(spec: str) -> tuple[str, bool]:
    """(``from_pretrained`` argument, whether it is a local folder) for a spec; checks local folders."""
    if spec.startswith("zoo:"):
        name = spec[4:]
        root = _zoo_root()
        folder = root / name
        if not name or not (folder / "config.json").is_file():
            known = sorted(p.name for p in root.iterdir() if (p / "config.json").is_file()) if root.is_dir() else []
            raise ModelLoadError(
                f"unknown zoo model {name!r}; known: {', '.join(known) or '(none: run `make zoo`)'}"
            )
        return str(folder), True
    path = Path(spec).expanduser()
    looks_local = path.exists() or spec.startswith((".", "/", "~")) or spec.count("/") > 1
    if looks_local:
        if not path.is_dir():
            raise ModelLoadError(f"model folder {spec!r} does not exist")
        if not (path / "config.json").is_file():
            raise ModelLoadError(f"model folder {spec!r} has no config.json; is it a HuggingFace checkpoint?")
        if not any(path.glob("*.safetensors")):
            pickles = sorted(p.name for p in path.iterdir() if p.suffix in PICKLE_SUFFIXES)
            if pickles:
                raise ModelLoadError(
                    f"model folder {spec!r} has only pickle weights ({', '.join(pickles)}); reachlens loads "
                    "safetensors only, because unpickling can run arbitrary code. Convert once with "
                    "`model.save_pretrained(folder, safe_serialization=True)` in a trusted session."
                )
            raise ModelLoadError(f"model folder {spec!r} has no *.safetensors weights")
        return str(path.resolve()), True
    return spec, False


def model_identity(spec: str) -> ModelIdentity:
    """The identity recorded with results: the spec and a cheap content fingerprint."""
    target, local = resolve_spec(spec)
    h = hashlib.sha256()
    if local:
        for f in sorted(Path(target).iterdir()):
            if f.suffix in (".safetensors", ".json") and f.is_file():
                size = f.stat().st_size
                h.update(f"{f.name}:{size}".encode())
                with f.open("rb") as fh:
                    h.update(fh.read(1 << 20))
                    if size > 2 << 20:
                        fh.seek(-(1 << 20), os.SEEK_END)
                        h.update(fh.read())
    else:
        h.update(spec.encode())
    return ModelIdentity(spec=spec, fingerprint=h.hexdigest()[:16])


def load_model(
    spec: str,
    *,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    trust_remote_code: bool = False,
):
    """Load ``spec`` as a TransformerBridge with its own tokenizer attached (``model.tokenizer``).

    Encoder-only and encoder-decoder models are refused (:class:`~reachlens.engine.UnsupportedModelError`)
    before any weights are read.

    >>> model = load_model("zoo:base")  # doctest: +SKIP
    >>> model.cfg.n_layers  # doctest: +SKIP
    6
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformer_lens.model_bridge import TransformerBridge

    target, local = resolve_spec(spec)
    _check_device(device)
    _refuse_unsupported(target, trust_remote_code)
    try:
        tokenizer = AutoTokenizer.from_pretrained(target, trust_remote_code=trust_remote_code)
    except OSError as err:
        raise ModelLoadError(f"could not load the tokenizer of {spec!r}: {err}") from err
    tokenizer.padding_side = "left"  # not kept by save_pretrained for every tokenizer class
    try:
        hf_model = AutoModelForCausalLM.from_pretrained(
            target, use_safetensors=True, trust_remote_code=trust_remote_code, dtype=dtype
        )
    except OSError as err:
        if local:
            raise
        raise ModelLoadError(
            f"could not load {spec!r} from the HuggingFace hub or its local cache ({err}); "
            "pass a local folder or a zoo:NAME instead"
        ) from err
    hf_model.eval()
    hf_model.to(device)  # the bridge leaves a model it is handed where it is
    model = TransformerBridge.boot_transformers(
        target, hf_model=hf_model, tokenizer=tokenizer, device=device, dtype=dtype,
        trust_remote_code=trust_remote_code,
    )
    model.eval()
    _use_own_tokenizer(model, tokenizer)
    model.reachlens_identity = model_identity(spec)
    return model


def _check_device(device: str | torch.device) -> None:
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise ModelLoadError(f"device {str(device)!r} is not a torch device; use cpu, cuda, cuda:1 or mps") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ModelLoadError(
            f"device {str(device)!r}: this torch ({torch.__version__}) sees no CUDA GPU; use --device cpu"
        )
    if dev.type == "mps" and not torch.backends.mps.is_available():
        raise ModelLoadError(f"device {str(device)!r}: MPS is not available here; use --device cpu")


def _refuse_unsupported(target: str, trust_remote_code: bool) -> None:
    """Encoder-only and encoder-decoder models are refused from their config, before any weights load."""
    from transformers import AutoConfig

    from reachlens.engine.stack import check_architecture

    try:
        config = AutoConfig.from_pretrained(target, trust_remote_code=trust_remote_code)
    except (OSError, ValueError):
        return  # the weights' own loading below reports what is wrong
    check_architecture(config)


def _use_own_tokenizer(model, tokenizer) -> None:
    """Give the bridge back the model's own tokenizer (it installed a BOS-prepending copy), and make
    TransformerLens' BOS default agree with it, so ``model.to_tokens(p)`` is what the engine decodes
    (see :mod:`reachlens.engine.tokens`)."""
    from reachlens.engine.tokens import special_tokens_added

    if tokenizer.pad_token is None and tokenizer.eos_token is not None:
        tokenizer.pad_token = tokenizer.eos_token  # what HF generate pads with
    # the bridge's public setter would re-wrap it in the BOS-prepending copy and reset d_vocab
    object.__setattr__(model, "_tokenizer", tokenizer)
    prepends_bos, appends_eos = special_tokens_added(tokenizer)
    model.cfg.tokenizer_prepends_bos = prepends_bos
    model.cfg.tokenizer_appends_eos = appends_eos
    model.cfg.default_prepend_bos = prepends_bos

