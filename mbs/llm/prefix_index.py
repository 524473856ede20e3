"""The in-memory index of the LLM cache's segment store (:mod:`mbs.llm.segments`): key prefix
-> record location in 16 bytes an entry (issue 22)."""

from __future__ import annotations

import sys
import threading

import numpy as np

__all__ = ["PrefixIndex"]


class PrefixIndex:
    """Key prefix (the first 8 bytes of a key, as a signed 64-bit integer) -> record location,
    in 16 bytes an entry: sorted NumPy arrays for most entries, a dict for the newest.

    A dict of Python integers costs about 120 bytes an entry; a SLURM array task that reads a
    cache of the paper's 3.7 million samples would hold 400+ MiB of it. New entries go into the
    dict and are merged into the arrays (one sort) once it holds ``merge_at``; a lookup checks
    the dict, then searches the arrays.
    """

    def __init__(self, merge_at: int = 1 << 16):
        # (sorted prefixes, their locations): replaced as one tuple, so a reader never pairs
        # one merge's keys with another's locations
        self._arrays = (np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64))
        self._recent: dict[int, int] = {}
        self._n = 0
        self.merge_at = int(merge_at)
        self._write = threading.Lock()  # writers one at a time; readers take no lock

    @staticmethod
    def prefix(key: bytes) -> int:
        """The index key of a (binary) cache key."""
        return int.from_bytes(key[:8], "little", signed=True)

    def get(self, prefix: int) -> int | None:
        """The location of ``prefix``, or ``None``."""
        loc = self._recent.get(prefix)
        if loc is not None:
            return loc
        keys, locs = self._arrays
        if not len(keys):
            return None
        i = int(np.searchsorted(keys, prefix))
        return int(locs[i]) if i < len(keys) and int(keys[i]) == prefix else None

    def __contains__(self, prefix: int) -> bool:
        return self.get(prefix) is not None

    def __len__(self) -> int:
        return self._n

    def nbytes(self) -> int:
        """Bytes held: the arrays, the dict and its integers."""
        recent = sys.getsizeof(self._recent) + sum(sys.getsizeof(k) + sys.getsizeof(v) for k, v in self._recent.items())
        return int(self._arrays[0].nbytes + self._arrays[1].nbytes) + recent

    def setdefault(self, prefix: int, loc: int) -> None:
        """Add ``prefix`` unless it is indexed already (the first record of a key wins)."""
        with self._write:
            if self.get(prefix) is None:
                self._recent[prefix] = loc
                self._n += 1
                self._maybe_merge()

    def set(self, prefix: int, loc: int) -> None:
        """Point ``prefix`` at ``loc`` (this process's newest record of a key wins)."""
        with self._write:
            if self.get(prefix) is None:
                self._n += 1
            self._recent[prefix] = loc
            self._maybe_merge()

    def add_footer(self, entries: list[tuple[bytes, int]], seg_no: int) -> None:
        """:meth:`setdefault` for every ``(key, offset)`` of a sealed segment's footer, in one sort."""
        if not entries:
            return
        with self._write:
            self._merge()
            self._add_sorted(entries, seg_no)

    def _add_sorted(self, entries: list[tuple[bytes, int]], seg_no: int) -> None:
        keys = np.fromiter((self.prefix(k) for k, _ in entries), dtype=np.int64, count=len(entries))
        locs = np.fromiter((seg_no << 40 | off for _, off in entries), dtype=np.int64, count=len(entries))
        keys, first = np.unique(keys, return_index=True)  # the first record of a key wins
        locs = locs[first]
        old_keys, old_locs = self._arrays
        new = ~np.isin(keys, old_keys)
        keys, locs = keys[new], locs[new]
        self._n += len(keys)
        merged_keys = np.concatenate([old_keys, keys])
        order = np.argsort(merged_keys, kind="stable")
        self._arrays = (merged_keys[order], np.concatenate([old_locs, locs])[order])

    def _maybe_merge(self) -> None:
        # geometric: the dict holds at most an eighth of the entries, merges cost O(n log n) in all
        if len(self._recent) >= max(self.merge_at, len(self._arrays[0]) // 8):
            self._merge()

    def _merge(self) -> None:
        if not self._recent:
            return
        new_keys = np.fromiter(self._recent.keys(), dtype=np.int64, count=len(self._recent))
        new_locs = np.fromiter(self._recent.values(), dtype=np.int64, count=len(self._recent))
        old_keys, old_locs = self._arrays
        keep = ~np.isin(old_keys, new_keys)  # the dict's entries shadow the arrays'
        keys = np.concatenate([old_keys[keep], new_keys])
        locs = np.concatenate([old_locs[keep], new_locs])
        order = np.argsort(keys, kind="stable")
        self._arrays = (keys[order], locs[order])  # readers see the dict's entries in it from here
        self._recent = {}
