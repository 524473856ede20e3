"""Mixing sources with configured ratios, and the train/validation split by stable hash."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from mbs.data import stable_hash
from mbs.errors import ConfigError


def quotas(available: Mapping[str, int], weights: Mapping[str, float], total: int | None, repeat: bool) -> dict[str, int]:
    """Rows to take from each source so that the mix follows ``weights``.

    Shares are ``w_i / sum(w)``. With ``total=None`` the total is the largest one that no
    source runs short of (``min_i available_i / share_i``), so no row repeats; a given
    ``total`` is split by largest remainders (the quotas sum exactly to it).

    >>> quotas({"a": 100, "b": 10}, {"a": 1, "b": 1}, None, False)
    {'a': 10, 'b': 10}
    >>> quotas({"a": 100, "b": 10}, {"a": 3, "b": 1}, 20, False)
    {'a': 15, 'b': 5}

    Args:
        available: Clean rows per source.
        weights: Mixing weight per source (>= 0); every source needs one.
        total: Rows wanted in all (``None``: the largest total without repeats).
        repeat: Allow a source short of its quota to repeat rows (upsampling).

    Returns:
        Rows per source.

    Raises:
        ValueError: A source without a weight or a weight for no source (names them), negative
            or all-zero weights, or a quota above a source's rows without ``repeat``.
    """
    missing = sorted(set(available) - set(weights))
    unknown = sorted(set(weights) - set(available))
    if missing or unknown:
        raise ConfigError(
            f"export.weights must name every source exactly: missing {missing}, unknown {unknown}; "
            f"sources are {sorted(available)}"
        )
    if any(float(w) < 0 for w in weights.values()) or not sum(float(w) for w in weights.values()) > 0:
        raise ConfigError(f"export.weights must be >= 0 with a positive sum, got {dict(weights)}")
    s = sum(float(w) for w in weights.values())
    share = {k: float(weights[k]) / s for k in available}
    if total is None:
        total = min(math.floor(available[k] / share[k] + 1e-9) for k in available if share[k] > 0)
    exact = {k: total * share[k] for k in available}
    out = {k: math.floor(v) for k, v in exact.items()}
    for k in sorted(available, key=lambda k: (-(exact[k] - out[k]), k))[: total - sum(out.values())]:
        out[k] += 1
    short = {k: (out[k], available[k]) for k in available if out[k] > available[k]}
    if short and not repeat:
        raise ConfigError(
            f"export.mix.total={total}: source(s) short of rows (quota, available): {short}; "
            f"lower the total, change the weights, or set export.mix.repeat=true"
        )
    return out


def take(items: Sequence[Any], key: Sequence[str], n: int, seed: int) -> list[Any]:
    """``n`` items in a fixed pseudo-random order (by stable hash of ``seed`` and each key);
    when ``n`` exceeds the items, whole passes repeat in that order."""
    order = sorted(range(len(items)), key=lambda i: (stable_hash(f"mix:{seed}:{key[i]}"), i))
    return [items[order[j % len(order)]] for j in range(n)] if order else []


def is_val(key: str, fraction: float, salt: str = "val") -> bool:
    """Whether the row with id ``key`` goes to validation (stable hash of salt and key)."""
    return (stable_hash(f"{salt}:{key}") % 10_000) < fraction * 10_000
