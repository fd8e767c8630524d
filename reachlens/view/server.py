"""``reachlens view``'s server: the standard library's HTTP server, read-only, on 127.0.0.1 by default.

Why the standard library (:mod:`http.server`): the viewer serves one static page, its script and style, and HTML
fragments rendered here from the run's tables; that needs routing of nine GET paths and nothing a framework adds
(templates, sessions, forms), so no dependency is taken on. ``ThreadingHTTPServer`` answers each request in its
own thread; the tables each set reads are kept once per set (:mod:`reachlens.view.source`, under a lock).

Safe by default: the server binds the loopback address on a free port unless told otherwise; it answers GET alone
(anything else is 405) and never writes (no path it serves names a file: sets and questions are keys of the sets it
found when it started); a request whose ``Host`` is not the address it serves is refused (a page elsewhere cannot
reach it by rebinding a name to 127.0.0.1); every answer carries a content security policy that allows the page's
own script and style from this server and nothing else: no inline script, no style attribute, no image, frame or
request to any other place (``default-src 'none'``). Every text of a run is escaped where the fragment is written
(:mod:`reachlens.view.render`). A user error (a filter that does not read, a damaged table) is one line on the
page; anything else is one line too, its traceback on the server's standard error, never on the page.
"""

from __future__ import annotations

import sys
import threading
import traceback
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from reachlens.errors import ReachlensError
from reachlens.view import render
from reachlens.view.query import View, find_set
from reachlens.view.source import QuestionSet, question_sets

__all__ = ["CSP", "ViewServer", "serve"]

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; "
       "base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
"""The content security policy of every answer."""
_STATIC = {"/": ("index.html", "text/html"), "/app.js": ("app.js", "text/javascript"),
           "/app.css": ("app.css", "text/css")}


class ViewServer(ThreadingHTTPServer):
    """The viewer's HTTP server over the question sets of some run directories."""

    daemon_threads = True

    def __init__(self, sets: list[QuestionSet], host: str = "127.0.0.1", port: int = 0) -> None:
        super().__init__((host, port), _Handler)
        self.sets = sets
        self.host = host

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}/"


def serve(dirs: list[str | Path], host: str = "127.0.0.1", port: int = 0) -> ViewServer:
    """A :class:`ViewServer` over ``dirs``, answering in a background thread (``server.shutdown()`` stops it).

    >>> server = serve(["runs/demo"]); print(server.url)  # doctest: +SKIP
    http://127.0.0.1:43121/
    """
    server = ViewServer(question_sets(dirs), host, port)
    threading.Thread(target=server.serve_forever, name="reachlens-view", daemon=True).start()
    return server


class _Handler(BaseHTTPRequestHandler):
    server: ViewServer
    server_version = "reachlens-view"
    sys_version = ""

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - the base class's name
        pass  # quiet: the terminal shows the address and errors only

    def _send(self, status: int, body: str, content_type: str = "text/html") -> None:
        data = body.encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", f"{content_type}; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Content-Security-Policy", CSP)
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "no-referrer")
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(data)

    def _refuse(self) -> None:
        self._send(HTTPStatus.METHOD_NOT_ALLOWED, render.problem_fragment("the viewer is read-only: GET alone"))

    do_POST = do_PUT = do_DELETE = do_PATCH = _refuse  # noqa: N815

    def do_GET(self) -> None:  # noqa: N802 - the base class's name
        port = self.server.server_address[1]
        if self.headers.get("Host") not in {f"{self.server.host}:{port}", f"localhost:{port}", f"127.0.0.1:{port}"}:
            self._send(HTTPStatus.FORBIDDEN, render.problem_fragment("unknown Host"))
            return
        url = urlsplit(self.path)
        try:
            if url.path in _STATIC:
                name, kind = _STATIC[url.path]
                self._send(HTTPStatus.OK, resources.files("reachlens.view").joinpath("static", name).read_text(), kind)
            elif url.path.startswith("/frag/"):
                self._send(HTTPStatus.OK, self._fragment(url.path[len("/frag/"):], parse_qs(url.query)))
            else:
                self._send(HTTPStatus.NOT_FOUND, render.problem_fragment(f"no page {url.path!r} here"))
        except ReachlensError as err:
            self._send(HTTPStatus.BAD_REQUEST, render.problem_fragment(str(err)))
        except Exception as err:  # noqa: BLE001 - a bug: one line on the page, its traceback here
            traceback.print_exc(file=sys.stderr)
            self._send(HTTPStatus.INTERNAL_SERVER_ERROR,
                       render.problem_fragment(f"the viewer failed on this request ({type(err).__name__}: {err})"))

    def _fragment(self, name: str, q: dict[str, list[str]]) -> str:
        one = {k: v[-1] for k, v in q.items()}
        sets = self.server.sets
        if name == "sets":
            return render.sets_fragment(sets, one.get("set"))
        qs = find_set(sets, one.get("set"))
        if name == "controls":
            return render.controls_fragment(qs)
        if name == "list":  # at once, the questions' texts filled in when ready; texts=wait: with them
            return render.list_fragment(qs, View(one.get("filter", ""), one.get("search", ""), one.get("sort", "")),
                                        wait=one.get("texts") == "wait")
        if name == "question":  # at once; the prompt (the task and the tokenizer loaded) asked for apart
            return render.question_fragment(qs, one.get("question", ""), prompt=False)
        if name == "prompt":
            return render.prompt_fragment(qs, one.get("question", ""))
        if name == "sample":
            side = one.get("side", "0")
            if not side.isdigit():
                raise ReachlensError(f"side={side!r} is not a number")
            return render.sample_fragment(qs, one.get("question", ""), int(side), one.get("idx", ""))
        raise ReachlensError(f"no fragment {name!r} here")
