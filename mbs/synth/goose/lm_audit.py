"""The choices-only language-model solver of the shortcut audit (optional; ``goose.audit.lm``).

A small causal LM scores each option *without the passage*: the option's mean token
log-likelihood (nats per token). If the answer is the most likely option more often than chance,
the options' surface form gives it away (a "choices-only" baseline; Balepur et al., 2024,
"Artifacts or Abduction: How Do LLMs Answer Multiple-Choice Questions Without the Question?").
Scores are cached per (model, text) in ``<cache_dir>/goose_audit_lm.jsonl``, so a resumed or
repeated audit loads the model only for texts it has not seen.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from mbs.llm.llamacpp import embedded_model_path, file_sha256

#: ``fn(text) -> mean token log-likelihood`` (nats per token).
TextScorer = Callable[[str], float]


class CachedLMSolver:
    """A solver (see :data:`mbs.synth.goose.audit.Solver`) scoring options by a cached ``TextScorer``.

    Args:
        scorer: Scores one text (e.g. :func:`llama_scorer`); called only on cache misses.
        model_id: Names the model in the cache key.
        cache_dir: Folder of ``goose_audit_lm.jsonl`` (``None``: no cache file).
    """

    def __init__(self, scorer: TextScorer, model_id: str, cache_dir: str | Path | None = None):
        self.scorer, self.model_id = scorer, model_id
        self.path = Path(cache_dir) / "goose_audit_lm.jsonl" if cache_dir else None
        self.cache: dict[str, float] = {}
        self.misses = 0
        if self.path and self.path.exists():
            for line in self.path.read_text(encoding="utf-8").splitlines():
                if line.strip():
                    row = json.loads(line)
                    self.cache[row["key"]] = float(row["score"])

    def _key(self, text: str) -> str:
        return hashlib.sha1(f"{self.model_id}\x1f{text}".encode()).hexdigest()

    def score(self, text: str) -> float:
        """Mean token log-likelihood of ``text`` (cached)."""
        key = self._key(text)
        if key not in self.cache:
            self.misses += 1
            self.cache[key] = float(self.scorer(text))
            if self.path:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                with self.path.open("a", encoding="utf-8") as f:
                    f.write(json.dumps({"key": key, "score": self.cache[key]}) + "\n")
        return self.cache[key]

    def __call__(self, options: Sequence[str], stem: str = "") -> list[float]:
        return [self.score(o) for o in options]


def llama_scorer(model_path: str | None = None, n_ctx: int = 512) -> tuple[TextScorer, str]:
    """A :data:`TextScorer` over a GGUF model run in process with llama-cpp-python.

    Args:
        model_path: GGUF file (``None``: the embedded SmolLM2-135M-Instruct).
        n_ctx: Context window in tokens (longer options are cut to it).

    Returns:
        ``(scorer, model_id)``; the model loads on the first call.

    Raises:
        FileNotFoundError: ``model_path`` does not exist.
    """
    path = Path(model_path).expanduser() if model_path else embedded_model_path()
    if not path.exists():
        raise FileNotFoundError(f"goose.audit.lm.model_path: GGUF file not found: {path}")
    st = path.stat()
    model_id = f"{path.name}@sha256:{file_sha256(str(path), st.st_size, st.st_mtime_ns)}"
    state: dict[str, Any] = {}  # the Llama model once loaded (llama-cpp-python has no type stubs)

    def score(text: str) -> float:
        from llama_cpp import Llama  # lazy: llama-cpp-python is an optional extra

        llm = state.get("llm")
        if llm is None:
            llm = state["llm"] = Llama(model_path=str(path), n_ctx=n_ctx, logits_all=True, verbose=False, n_threads=1)
        toks = llm.tokenize(text.encode("utf-8"), add_bos=True)[:n_ctx]
        if len(toks) < 2:
            return 0.0
        llm.reset()
        llm.eval(toks)
        logits = np.asarray(llm.scores[: len(toks) - 1], dtype=np.float64)
        logz = np.log(np.exp(logits - logits.max(axis=1, keepdims=True)).sum(axis=1)) + logits.max(axis=1)
        lp = logits[np.arange(len(toks) - 1), toks[1:]] - logz
        out = float(lp.mean())
        return out if math.isfinite(out) else -1e9

    return score, model_id
