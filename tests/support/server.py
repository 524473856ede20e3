"""Start and stop llama-cpp-python's OpenAI-compatible server on 127.0.0.1 (tests, benchmarks).

Used by the ``llama_server`` fixture (``tests/conftest.py``) and by the benchmarks. The
server runs the embedded SmolLM2-135M-Instruct GGUF unless another model is given. Tests import it as ``support.server``
(pytest puts ``tests/`` on the path); benchmarks load it by file path.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on right now (bound once, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class LlamaServer:
    """``python -m llama_cpp.server`` in a child process, on one fixed port across restarts.

    Args:
        model_path: GGUF file; ``None`` means the embedded SmolLM2-135M-Instruct.
        port: TCP port; ``None`` picks a free one.
        n_ctx: Context window in tokens.
        extra_args: More command-line arguments for the server.
        startup_timeout_s: Seconds to wait for ``/v1/models`` to answer.

    Attributes:
        base_url: ``http://127.0.0.1:<port>/v1``.
        port: The TCP port.
        process: The ``subprocess.Popen`` of the running server (``None`` when stopped).
        log_path: File receiving the server's stdout and stderr.
    """

    host = "127.0.0.1"

    def __init__(
        self,
        model_path: str | os.PathLike | None = None,
        port: int | None = None,
        n_ctx: int = 2048,
        extra_args: tuple[str, ...] = (),
        startup_timeout_s: float = 900.0,
    ):
        if model_path is None:
            from mbs.llm.llamacpp import embedded_model_path

            model_path = embedded_model_path()
        self.model_path = Path(model_path)
        self.port = int(port) if port else free_port(self.host)
        self.n_ctx = int(n_ctx)
        self.extra_args = tuple(extra_args)
        self.startup_timeout_s = float(startup_timeout_s)
        self.process: subprocess.Popen | None = None
        fd, log_path = tempfile.mkstemp(prefix="llama-server-", suffix=".log")
        os.close(fd)
        self.log_path = Path(log_path)

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def command(self) -> list[str]:
        """The server's command line."""
        return [
            sys.executable, "-m", "llama_cpp.server",
            "--model", str(self.model_path),
            "--host", self.host,
            "--port", str(self.port),
            "--n_ctx", str(self.n_ctx),
            *self.extra_args,
        ]

    def start(self) -> LlamaServer:
        """Start the server and wait until ``/v1/models`` answers.

        Raises:
            RuntimeError: The server exited or did not answer within ``startup_timeout_s``.
        """
        if self.process is not None and self.process.poll() is None:
            return self
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                self.command(), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True,  # a Ctrl-C in the terminal goes to pytest, which stops us
            )
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"llama server exited with code {self.process.returncode}:\n{self.log_tail()}"
                )
            try:
                with urllib.request.urlopen(f"{self.base_url}/models", timeout=2) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass
            time.sleep(0.2)
        self.kill()
        raise RuntimeError(
            f"llama server on port {self.port} not ready after {self.startup_timeout_s:g} s:\n{self.log_tail()}"
        )

    def kill(self) -> None:
        """Kill the server at once (SIGKILL), as a crash would."""
        if self.process is not None:
            if self.process.poll() is None:
                self.process.kill()
            self.process.wait(timeout=30)
            self.process = None

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop the server gracefully (SIGTERM), killing it after ``timeout_s`` seconds."""
        if self.process is not None:
            if self.process.poll() is None:
                self.process.terminate()
                try:
                    self.process.wait(timeout=timeout_s)
                except subprocess.TimeoutExpired:
                    pass
            self.kill()

    def restart(self) -> LlamaServer:
        """Kill the server if running and start it again on the same port."""
        self.kill()
        return self.start()

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
        try:
            self.log_path.unlink()
        except OSError:
            pass
