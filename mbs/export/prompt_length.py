"""Prompt lengths in tokens: what export reports and what ``mbs-train`` gives verl.

verl drops every training prompt longer than ``data.max_prompt_length`` when
``filter_overlong_prompts`` is on (its default recipe value 1,024 tokens), without a word in
mbs' outputs: the exported row count would not be what trains. So export counts each row's
prompt tokens and reports the rows over ``export.prompt_length.limit``, and ``mbs-train``
derives ``max_prompt_length`` from the data or refuses data with a longer prompt.

Counting (:class:`PromptCounter`): with a tokenizer (a local folder, or a Hugging Face name
already in the local cache; needs ``transformers``, which verl installs), the exact count verl
uses: the ``input_ids`` of ``tokenizer.apply_chat_template(messages, add_generation_prompt=True)``. Without
one, an upper bound: the UTF-8 bytes of every message plus 16 tokens per message for the chat
template (byte-level BPE tokenizers never emit more tokens than bytes), so a derived limit
never drops a row, and a row reported over the limit may in fact fit.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from mbs.errors import ConfigError

#: Template tokens allowed per message by the upper bound.
PER_MESSAGE = 16


class PromptCounter:
    """Counts the prompt tokens of chat messages (exactly with a tokenizer, else an upper bound).

    Args:
        tokenizer: A local tokenizer folder or a cached Hugging Face name; ``None`` for the
            upper bound.

    Raises:
        mbs.errors.ConfigError: ``transformers`` is missing or the tokenizer cannot be loaded
            (names it; a :class:`ValueError`).
    """

    def __init__(self, tokenizer: str | None = None):
        self.name = tokenizer
        self.tok = None
        if tokenizer:
            try:
                from transformers import AutoTokenizer  # lazy: torch/transformers are optional extras
            except ImportError as err:
                raise ConfigError(f"tokenizer={tokenizer!r} needs the transformers package (pip install transformers)") from err
            try:
                self.tok = AutoTokenizer.from_pretrained(str(tokenizer), local_files_only=True)
            except (OSError, ValueError) as err:
                raise ConfigError(f"tokenizer={tokenizer!r} cannot be loaded from local files: {err}") from err

    @property
    def exact(self) -> bool:
        return self.tok is not None

    def count(self, messages: Sequence[dict[str, str]]) -> int:
        """Prompt tokens of ``messages`` (a chat list with ``role`` and ``content``)."""
        if self.tok is not None:
            ids = self.tok.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=True)
            # transformers 5 returns a BatchEncoding (len 2: its keys), 4 a list of ids; verl's
            # filter reads the ids the same way (verl.utils.tokenizer.normalize_token_ids)
            return len(ids["input_ids"] if hasattr(ids, "keys") else ids)
        return sum(len(str(m.get("content") or "").encode("utf-8")) + PER_MESSAGE for m in messages)

    def describe(self) -> dict[str, Any]:
        """``{"tokenizer", "exact", "method"}`` for summaries."""
        method = "apply_chat_template(add_generation_prompt=True)" if self.exact else f"upper bound: UTF-8 bytes + {PER_MESSAGE} per message"
        return {"tokenizer": self.name, "exact": self.exact, "method": method}


def length_report(rows: Iterable[tuple[str, str, Sequence[dict[str, str]]]], counter: PromptCounter, limit: int | None, show: int = 50) -> dict[str, Any]:
    """Prompt tokens of exported rows against the training prompt length.

    Args:
        rows: ``(problem id, split, messages)`` per row.
        counter: How tokens are counted.
        limit: The training ``max_prompt_length`` in tokens (``None``: only measure).
        show: At most this many over-limit rows are listed.

    Returns:
        ``{"limit", "tokenizer", "exact", "method", "max_tokens" (per split and overall),
        "over_limit" (count per split), "over_limit_rows" ([{id, split, tokens}], longest
        first)}``.
    """
    over: list[dict[str, Any]] = []
    longest: dict[str, int] = {}
    counts: dict[str, int] = {}
    for pid, split, messages in rows:
        n = counter.count(messages)
        longest[split] = max(longest.get(split, 0), n)
        counts.setdefault(split, 0)
        if limit is not None and n > limit:
            counts[split] += 1
            over.append({"id": pid, "split": split, "tokens": n})
    over.sort(key=lambda r: (-r["tokens"], r["id"]))
    return {
        "limit": limit,
        **counter.describe(),
        "max_tokens": {**dict(sorted(longest.items())), "all": max(longest.values(), default=0)},
        "over_limit": {**dict(sorted(counts.items())), "all": sum(counts.values())},
        "over_limit_rows": over[:show],
    }


def parquet_prompts(path: str | Path) -> list[tuple[str, str, list[dict[str, str]]]]:
    """``(id, split, messages)`` of every row of an exported parquet file."""
    table = pq.read_table(path, columns=["prompt", "extra_info"]).to_pylist()
    return [(str((r.get("extra_info") or {}).get("id")), str((r.get("extra_info") or {}).get("split")), r["prompt"]) for r in table]
