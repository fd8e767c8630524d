"""The vLLM worker: a script run by the python of an environment that has vLLM (not reachlens).

It imports only the standard library and vLLM, so that vLLM may live in a venv of its own (its
transformers pin need not agree with the main environment's). It speaks JSON lines on its
standard input and output; everything vLLM prints goes to standard error.

    -> {"model": PATH, "tokenizer": PATH, "dtype": "float32", "max_model_len": 256, "options": {...}}
    <- {"ok": true, "vllm": "0.32.0"}                       (or {"error": "..."} and exit)
    -> {"prompts": [[ids], ...], "requests": [{"prompt": 0, "seed": 123 | null}, ...],
        "max_tokens": 96, "temperature": 0.8, "top_p": 1.0, "stop": ["\\n"], "stop_token_ids": [151644]}
    <- {"outputs": [{"token_ids": [...], "logprobs": [...], "finish_reason": "stop" | "length",
                     "stop_reason": null | "..." | 123}, ...]}

A request with ``seed`` null is greedy (temperature 0); one with a seed samples with vLLM's own
per-request generator seeded by it, so the sample depends on that seed alone, not on its batch.
"""

from __future__ import annotations

import json
import os
import sys
import traceback


def _send(stream, obj) -> None:
    stream.write(json.dumps(obj) + "\n")
    stream.flush()


def _sampling_params(SamplingParams, request: dict, job: dict):
    common = dict(max_tokens=job["max_tokens"], stop=list(job["stop"]) or None,
                  stop_token_ids=list(job.get("stop_token_ids", [])) or None, logprobs=0,
                  skip_special_tokens=True, include_stop_str_in_output=False)
    if request["seed"] is None:
        return SamplingParams(n=1, temperature=0.0, **common)
    return SamplingParams(n=1, temperature=job["temperature"], top_p=job["top_p"], seed=int(request["seed"]),
                          **common)


def main() -> int:
    # the protocol keeps the real stdout; whatever vLLM prints goes to stderr
    proto = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    try:
        setup = json.loads(sys.stdin.readline())
        import torch
        import vllm
        from vllm import LLM, SamplingParams
        from vllm.inputs import TokensPrompt

        options = dict(setup.get("options", {}))
        if not torch.cuda.is_available():
            # CPU: no graph compilation (start-up), and no chunked prefill: vLLM rewinds a seeded
            # request's generator after a partial prefill, which a CPU torch.Generator cannot do
            options.setdefault("enforce_eager", True)
            options.setdefault("enable_chunked_prefill", False)
        llm = LLM(model=setup["model"], tokenizer=setup["tokenizer"], dtype=setup["dtype"],
                  max_model_len=setup["max_model_len"], seed=0, trust_remote_code=False,
                  load_format="safetensors", **options)
    except Exception as err:  # noqa: BLE001 - reported to the parent, which raises it
        traceback.print_exc()
        _send(proto, {"error": f"{type(err).__name__}: {err}"})
        return 1
    _send(proto, {"ok": True, "vllm": vllm.__version__})
    for line in sys.stdin:
        job = json.loads(line)
        prompts = [TokensPrompt(prompt_token_ids=job["prompts"][r["prompt"]]) for r in job["requests"]]
        params = [_sampling_params(SamplingParams, r, job) for r in job["requests"]]
        try:
            results = llm.generate(prompts, sampling_params=params, use_tqdm=False)
        except Exception as err:  # noqa: BLE001
            traceback.print_exc()
            _send(proto, {"error": f"{type(err).__name__}: {err}"})
            return 1
        outputs = []
        for res in results:
            out = res.outputs[0]
            logprobs = [float(step[tok].logprob) for step, tok in zip(out.logprobs or [], out.token_ids)]
            outputs.append({"token_ids": list(out.token_ids), "logprobs": logprobs,
                            "finish_reason": out.finish_reason, "stop_reason": out.stop_reason})
        _send(proto, {"outputs": outputs})
    return 0


if __name__ == "__main__":
    sys.exit(main())
