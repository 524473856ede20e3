"""Per-backend usage of a run: calls, samples, cache hits, tokens and seconds, as deltas."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mbs.llm import build_backend


class BackendMeter:
    """Calls, samples, cache hits and tokens of each backend used by a run (deltas over the run).

    A student and a teacher that share one model share one backend (built once by
    :func:`mbs.llm.build_backend`); they are reported once, under both names.

    Args:
        roles: ``(role name, backend config)`` for every teacher, judge and student.
        cache_dir: The LLM cache folder.
    """

    KEYS = ("calls", "samples", "cache_hits", "prompt_tokens", "completion_tokens", "seconds")

    def __init__(self, roles: Sequence[tuple[str, Any]], cache_dir: str | None):
        self.by_id: dict[int, tuple[Any, list[str], dict[str, Any]]] = {}
        for name, backend_cfg in roles:
            if backend_cfg is None:
                continue
            b = build_backend(backend_cfg, cache_dir)
            if id(b) not in self.by_id:
                self.by_id[id(b)] = (b, [], b.stats.as_dict())
            self.by_id[id(b)][1].append(name)

    def report(self) -> dict[str, dict[str, Any]]:
        out = {}
        for b, names, before in self.by_id.values():
            after = b.stats.as_dict()
            row = {k: after[k] - before[k] for k in self.KEYS}
            row["seconds"] = round(row["seconds"], 3)
            row["model_id"] = b.model_id
            out["+".join(dict.fromkeys(names))] = row
        return out
