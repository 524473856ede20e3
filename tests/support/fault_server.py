"""An OpenAI-compatible chat-completions server on 127.0.0.1 that injects faults (tests).

Each ``POST .../chat/completions`` is answered according to a *plan*: a function
``plan(request number, body) -> fault`` (request numbers count from 0 across the server's
life), or a list of faults used in order (then ``"ok"`` for every later request). A fault is
one of :data:`FAULTS`:

==============  ========================================================================
``ok``          a valid completion: ``n`` choices of ``The answer is \\boxed{<answer>}.``
``500``         HTTP 500 with an OpenAI-style error body
``429``/``503`` that status with ``Retry-After: <retry_after_s>``
``html``        HTTP 200 with an HTML page (a proxy or captive portal)
``null``        HTTP 200, ``content: null`` in every choice
``int``         HTTP 200, ``content: 7`` (not a string)
``truncated``   HTTP 200, a JSON body cut in half (the Content-Length matches the cut body)
``no_choices``  HTTP 200, ``choices: []``
``drop``        the connection is closed without a reply
``stall``       the reply is sent only after ``stall_s`` seconds (the client times out first)
==============  ========================================================================

``answer(body) -> str`` decides the boxed answer (default ``"2"``). The server runs in a
daemon thread (``with FaultServer(plan) as server: server.base_url``) or as a script:
``python fault_server.py --port P --plan '["stall"]'`` (prints ``ready`` when it listens).
"""

from __future__ import annotations

import argparse
import json
import socket
import threading
import time
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

FAULTS = ("ok", "500", "429", "503", "html", "null", "int", "truncated", "no_choices", "drop", "stall")

Plan = Callable[[int, dict], str] | Sequence[str]


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # many requests in flight at once (the default backlog of 5 resets them)


class FaultServer:
    """See the module docstring.

    Args:
        plan: The fault of each request (a function or a list, see above).
        answer: The boxed answer of an ``ok`` reply, from the request body.
        retry_after_s: ``Retry-After`` of 429 and 503 replies, in seconds.
        stall_s: How long a ``stall`` reply waits, in seconds.
        port: TCP port (``0``: a free one).

    Attributes:
        hits: Requests received, in order: ``(fault, body)``.
    """

    def __init__(
        self,
        plan: Plan = (),
        answer: Callable[[dict], str] = lambda body: "2",
        retry_after_s: float = 0.2,
        stall_s: float = 30.0,
        port: int = 0,
    ):
        self.plan = plan
        self.answer = answer
        self.retry_after_s = retry_after_s
        self.stall_s = stall_s
        self.hits: list[tuple[str, dict]] = []
        self.lock = threading.Lock()
        self.stop_stalls = threading.Event()
        self._server = _Server(("127.0.0.1", port), self._handler())
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def faults(self) -> list[str]:
        """The fault each request got, in order."""
        with self.lock:
            return [f for f, _ in self.hits]

    def _fault(self, body: dict) -> str:
        with self.lock:
            k = len(self.hits)
            if callable(self.plan):
                fault = self.plan(k, body)
            else:
                fault = self.plan[k] if k < len(self.plan) else "ok"
            if fault not in FAULTS:
                raise ValueError(f"unknown fault {fault!r}; valid: {FAULTS}")
            self.hits.append((fault, body))
        return fault

    def completion(self, body: dict, content: Any = None, n: int | None = None) -> dict:
        """A chat completion body answering ``body`` (``content``: override the text)."""
        n = int(body.get("n") or 1) if n is None else n
        text = f"The answer is \\boxed{{{self.answer(body)}}}." if content is None else content
        return {
            "id": "chatcmpl-fault",
            "object": "chat.completion",
            "created": 0,
            "model": body.get("model", "fault"),
            "choices": [
                {"index": j, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
                for j in range(n)
            ],
            "usage": {"prompt_tokens": 5, "completion_tokens": 6 * n, "total_tokens": 5 + 6 * n},
        }

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # keep test output quiet
                pass

            def _send(self, status: int, data: bytes, ctype: str = "application/json", headers: dict | None = None):
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", ctype)
                    self.send_header("Content-Length", str(len(data)))
                    for k, v in (headers or {}).items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up
                    pass

            def do_GET(self):
                if self.path.endswith("/models"):
                    self._send(200, json.dumps({"object": "list", "data": [{"id": "fault", "object": "model"}]}).encode())
                else:
                    self._send(404, b"{}")

            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                body = json.loads(raw or b"{}")
                fault = server._fault(body)
                if fault == "drop":
                    self.close_connection = True
                    try:
                        self.connection.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                    return
                if fault == "stall":
                    server.stop_stalls.wait(server.stall_s)
                    fault = "ok"
                if fault == "ok":
                    self._send(200, json.dumps(server.completion(body)).encode())
                elif fault in ("500", "429", "503"):
                    err = {"error": {"message": f"injected {fault}", "type": "server_error", "code": None}}
                    headers = {"Retry-After": f"{server.retry_after_s:g}"} if fault != "500" else {}
                    self._send(int(fault), json.dumps(err).encode(), headers=headers)
                elif fault == "html":
                    self._send(200, b"<html><body><h1>Gateway login</h1></body></html>", "text/html")
                elif fault in ("null", "int"):
                    obj = server.completion(body)
                    for c in obj["choices"]:
                        c["message"]["content"] = None if fault == "null" else 7
                    self._send(200, json.dumps(obj).encode())
                elif fault == "truncated":
                    data = json.dumps(server.completion(body)).encode()
                    self._send(200, data[: len(data) // 2])
                elif fault == "no_choices":
                    obj = server.completion(body)
                    obj["choices"] = []
                    self._send(200, json.dumps(obj).encode())

        return Handler

    def start(self) -> FaultServer:
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stop_stalls.set()
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> FaultServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--plan", default="[]", help="JSON list of faults, one per request (then ok)")
    ap.add_argument("--stall-s", type=float, default=600.0)
    args = ap.parse_args()
    server = FaultServer(json.loads(args.plan), stall_s=args.stall_s, port=args.port).start()
    print("ready", flush=True)
    try:
        while True:
            time.sleep(3600)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
