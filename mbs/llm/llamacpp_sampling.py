"""mbs's one sampling order in llama.cpp's own samplers (issue 47).

:func:`sampler_chain` is the chain every sequence of :class:`mbs.llm.llamacpp_batched.BatchedDecoder`
draws with: temperature first, then top-k, top-p and min-p on the tempered distribution
(:data:`mbs.llm.base.SAMPLER_ORDER`), then a seeded draw. :func:`kept_distribution` runs the same
filters over one logits row and returns what they keep, for the tests that compare engines.
"""

from __future__ import annotations

import ctypes

import numpy as np

__all__ = ["LLAMA_CPP_DEFAULTS", "TOKEN_DATA", "filter_chain", "kept_distribution", "sampler_chain"]

#: NumPy view of llama.cpp's ``llama_token_data`` (token id, logit, probability), for filling candidate arrays.
TOKEN_DATA = [("id", "<i4"), ("logit", "<f4"), ("p", "<f4")]

#: The filters mbs's llama.cpp engine applies besides a request's temperature and top_p unless
#: ``backend.top_k`` / ``backend.min_p`` say otherwise: llama-cpp-python's chat defaults, top-k 40
#: and min-p 0.05 (repeat/frequency/presence penalties are neutral and left out).
LLAMA_CPP_DEFAULTS = {"top_k": 40, "min_p": 0.05}


def sampler_chain(seed: int, temperature: float, top_p: float, top_k: int = LLAMA_CPP_DEFAULTS["top_k"],
                  min_p: float = LLAMA_CPP_DEFAULTS["min_p"]):
    """A llama.cpp sampler chain in mbs's one sampling order (:data:`mbs.llm.base.SAMPLER_ORDER`).

    ``temperature > 0``: temperature, then top-k ``top_k`` (0: off), top-p ``top_p`` and min-p
    ``min_p`` (0: off; min_keep 1 each) on the tempered distribution, then a draw seeded ``seed``:
    the order of Hugging Face ``generate`` and so of TRL's GRPO rollouts (issue 47). llama-cpp-python's
    own chat completion puts temperature last, so its min-p 0.05 at temperature 0.6 keeps tokens whose
    *untempered* ratio to the top token is at least 0.05, where TRL keeps only those at least
    0.05 ** 0.6 = 0.166 of it. ``temperature == 0``: greedy; ``< 0``: a seeded draw from the raw
    distribution. Free it with ``llama_sampler_free``.

    Args:
        seed: Seed of the draw (31-bit, :func:`mbs.llm.base.sample_seed`).
        temperature: Sampling temperature.
        top_p: Nucleus mass.
        top_k: Most likely tokens kept (``backend.top_k``; 0: all).
        min_p: Tokens below ``min_p`` times the most likely one's probability dropped (``backend.min_p``; 0: none).
    """
    import llama_cpp as L  # lazy: llama-cpp-python is an optional extra

    chain = L.llama_sampler_chain_init(L.llama_sampler_chain_default_params())
    for part in filter_chain(temperature, top_p, top_k, min_p) + [
        L.llama_sampler_init_dist(seed) if temperature != 0 else L.llama_sampler_init_greedy()
    ]:
        L.llama_sampler_chain_add(chain, part)  # the chain owns (and frees) its parts
    return chain


def filter_chain(temperature: float, top_p: float, top_k: int, min_p: float) -> list:
    """The llama.cpp samplers of :func:`sampler_chain` before its draw: temperature, top-k, top-p,
    min-p (none for ``temperature <= 0``). Applied to a candidate array without the draw, they leave
    the kept tokens and their tempered logits (what ``tests/llm/test_one_policy.py`` compares
    with Hugging Face's warpers)."""
    import llama_cpp as L  # lazy: llama-cpp-python is an optional extra

    if temperature <= 0:
        return []
    return [
        L.llama_sampler_init_temp(float(temperature)),
        L.llama_sampler_init_top_k(int(top_k)),
        L.llama_sampler_init_top_p(float(top_p), 1),
        L.llama_sampler_init_min_p(float(min_p), 1),
    ]


def kept_distribution(logits, temperature: float, top_p: float, top_k: int, min_p: float) -> dict[int, float]:
    """The tokens llama.cpp's sampler chain keeps from one logits row, with the probabilities it draws them by.

    Runs llama.cpp's own samplers of :func:`filter_chain` (temperature, top-k, top-p, min-p) over
    the row, as :meth:`BatchedDecoder._first_token` does before its seeded draw, then the softmax
    of the kept tempered logits (the draw's distribution). What ``tests/llm/test_one_policy.py``
    compares with Hugging Face's warpers (issue 47).

    Args:
        logits: One row of raw logits, shape ``(n_vocab,)`` (float32).
        temperature, top_p, top_k, min_p: The request's sampling (``temperature > 0``).

    Returns:
        ``{token id: probability}`` of the kept tokens (summing to 1).

    Raises:
        ValueError: ``temperature <= 0`` (greedy keeps one token; nothing to compare).
    """
    import llama_cpp as L  # lazy: llama-cpp-python is an optional extra

    if temperature <= 0:
        raise ValueError(f"temperature={temperature}: the kept distribution needs temperature > 0")
    n = len(logits)
    cand = (L.llama_token_data * n)()
    view = np.frombuffer(cand, dtype=np.dtype(TOKEN_DATA))
    view["id"] = np.arange(n, dtype="<i4")
    view["logit"] = np.asarray(logits, dtype="<f4")
    view["p"] = 0.0
    cur = L.llama_token_data_array(data=cand, size=n, selected=-1, sorted=False)
    chain = L.llama_sampler_chain_init(L.llama_sampler_chain_default_params())
    try:
        for part in filter_chain(temperature, top_p, top_k, min_p):
            L.llama_sampler_chain_add(chain, part)
        L.llama_sampler_apply(chain, ctypes.byref(cur))
        ids = [int(cur.data[i].id) for i in range(cur.size)]
        kept = np.array([float(cur.data[i].logit) for i in range(cur.size)], dtype=np.float64)
    finally:
        L.llama_sampler_free(chain)
    probs = np.exp(kept - kept.max())
    probs /= probs.sum()
    return dict(zip(ids, probs.tolist()))
