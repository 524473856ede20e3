"""A tiny OpenAI-compatible server with vLLM-style metrics, run as a script by the service tests.

``python fake_openai.py --host H --port P --model NAME`` serves ``GET /v1/models``,
``GET /metrics`` (``vllm:num_requests_running``, ``vllm:num_requests_waiting``,
``vllm:request_success_total``) and ``POST /v1/chat/completions``: every one of the ``n``
choices answers ``\\boxed{2}`` (so EASY toy problems are solved and the others failed).
``--fail`` exits at once with code 3 (a server that cannot start).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--model", default="fake")
    ap.add_argument("--fail", action="store_true")
    args = ap.parse_args()
    if args.fail:
        print("fake_openai: failing on purpose", flush=True)
        sys.exit(3)
    lock = threading.Lock()
    done = [0]

    class Handler(BaseHTTPRequestHandler):
        def _send(self, status: int, body: bytes, ctype: str = "application/json") -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            if self.path == "/v1/models":
                self._send(200, json.dumps({"object": "list", "data": [{"id": args.model, "object": "model"}]}).encode())
            elif self.path == "/metrics":
                with lock:
                    n = done[0]
                text = (
                    f'vllm:num_requests_running{{model_name="{args.model}"}} 0.0\n'
                    f'vllm:num_requests_waiting{{model_name="{args.model}"}} 0.0\n'
                    f'vllm:request_success_total{{finished_reason="stop",model_name="{args.model}"}} {n}.0\n'
                )
                self._send(200, text.encode(), "text/plain")
            else:
                self._send(404, b"{}")

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
            n = int(body.get("n") or 1)
            choices = [
                {"index": j, "message": {"role": "assistant", "content": "So the answer is \\boxed{2}."}, "finish_reason": "stop"}
                for j in range(n)
            ]
            with lock:
                done[0] += 1
            out = {
                "id": "chatcmpl-fake", "object": "chat.completion", "created": 0, "model": args.model, "choices": choices,
                "usage": {"prompt_tokens": 5, "completion_tokens": 8 * n, "total_tokens": 5 + 8 * n},
            }
            self._send(200, json.dumps(out).encode())

        def log_message(self, *a):
            pass

    server = ThreadingHTTPServer((args.host, args.port), Handler)
    print(f"fake_openai: listening on {args.host}:{args.port}", flush=True)
    server.serve_forever(poll_interval=0.1)


if __name__ == "__main__":
    main()
