"""The chat-template renderer's child process: renders conversations with transformers' own Jinja sandbox
(``render_jinja_template``, what ``apply_chat_template`` calls) under a time and memory bound.

Run as ``python -P _template_core.py`` by :mod:`reachlens.tasks.chat`, never imported by reachlens: it loads
transformers' chat-template module alone (no torch, no reachlens). It reads one JSON request on stdin
(``template``, ``conversations``, ``kwargs``, ``seconds``, ``memory``, ``max_chars``) and writes one JSON reply
on stdout: ``{"rendered": [{"text": ...} | {"error": ...}, ...]}``, one entry per conversation, or
``{"error": ...}`` when the bound was passed (the whole render is then refused). Past ``seconds`` a Python-level
loop is stopped by an alarm; a C-level one by ``RLIMIT_CPU`` (the parent also kills it); past ``memory`` bytes
above what the process holds after its imports, an allocation fails (``RLIMIT_AS``).
"""

from __future__ import annotations

import json
import resource
import signal
import sys


class _Timeout(BaseException):
    """Raised by the alarm (a BaseException, so no ``except Exception`` on the way swallows it)."""


def _limit(seconds: float, memory: int) -> None:
    def alarm(signum, frame):
        raise _Timeout

    signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    used = resource.getrusage(resource.RUSAGE_SELF)
    cpu = int(used.ru_utime + used.ru_stime + seconds) + 2
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    resource.setrlimit(resource.RLIMIT_CPU, (cpu if hard == resource.RLIM_INFINITY else min(cpu, hard), hard))
    try:
        with open("/proc/self/statm") as f:
            size = int(f.read().split()[0]) * resource.getpagesize()
    except OSError:
        size = 1 << 30
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = size + memory
    resource.setrlimit(resource.RLIMIT_AS, (limit if hard == resource.RLIM_INFINITY else min(limit, hard), hard))


def _one_line(err: BaseException) -> str:
    text = " ".join(f"{type(err).__name__}: {err}".split())
    return text if len(text) <= 300 else text[:300] + "..."


def _render(request: dict) -> dict:
    from transformers.utils.chat_template_utils import render_jinja_template

    _limit(float(request["seconds"]), int(request["memory"]))
    out = []
    try:
        for conversation in request["conversations"]:
            try:
                rendered, _ = render_jinja_template(conversations=[conversation], chat_template=request["template"],
                                                    add_generation_prompt=True, **request["kwargs"])
                text = rendered[0]
            except (MemoryError, _Timeout):
                raise
            except RecursionError:
                out.append({"error": "it recurses without end (RecursionError)"})
                continue
            except Exception as err:  # the template's own failure: a line for the user
                out.append({"error": _one_line(err)})
                continue
            if not isinstance(text, str) or len(text) > request["max_chars"]:
                out.append({"error": f"it renders more than {request['max_chars']:,} characters"})
            else:
                out.append({"text": text})
    except _Timeout:
        return {"error": f"it took longer than {request['seconds']:g} s to render"}
    except MemoryError:
        return {"error": f"it needed more than {request['memory'] >> 20:,} MiB to render"}
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    return {"rendered": out}


if __name__ == "__main__":
    _request = json.loads(sys.stdin.read())
    _reply = json.dumps(_render(_request))
    sys.stdout.write(_reply)
    sys.stdout.flush()
