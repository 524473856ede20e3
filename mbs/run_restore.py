"""A start that fails before it has written anything of its own leaves the run directory as it was.

Admitting a run (:class:`mbs.io.RunDir`) removes ``manifest.json`` (a stage restarting is not
finished), records the config and git revision, and the command line writes Hydra's ``.hydra/``
files and the job log there. A start can still fail after that, before any record or output is
written: a policy that does not resolve, a missing checkpoint, data that does not load, a backend
that never answers. :class:`StartSnapshot`, taken at admission, tells such a start apart from one
that changed the directory's contents, and puts the former back exactly as it was: the manifest
of a finished run, the bookkeeping files (:data:`BOOKKEEPING`) byte for byte, the job log cut back
to its old length, new empty files removed. A start that changed anything else (a record
appended, a summary written, a checkpoint saved, a file removed) is left as it is: its directory
is genuinely unfinished, and its manifest stays gone.

A process killed outright (``kill -9``) restores nothing: the manifest is already gone, so the
directory never claims a finish it does not have.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

__all__ = ["BOOKKEEPING", "StartSnapshot"]

#: Files a start rewrites before doing any work (relative to the run directory): restored byte
#: for byte (or removed, when they are new) after a start that changed nothing else.
BOOKKEEPING = frozenset({
    "manifest.json", "config.yaml", "git.json", "sampling.json",
    ".hydra/config.yaml", ".hydra/hydra.yaml", ".hydra/overrides.yaml",
})

#: Files never compared (the lock's holder line is put back by the run directory itself).
_IGNORED = frozenset({".lock"})


def _stats(root: Path) -> dict[str, tuple[int, int]]:
    """``{relative path: (size in bytes, mtime in ns)}`` of every file under ``root``."""
    out = {}
    for dirpath, _, names in os.walk(root):
        for name in names:
            path = Path(dirpath) / name
            rel = str(path.relative_to(root))
            if rel in _IGNORED:
                continue
            try:
                st = path.stat()
            except OSError:
                continue
            out[rel] = (st.st_size, st.st_mtime_ns)
    return out


class StartSnapshot:
    """The state of a run directory at admission: every file's size and mtime, and the bytes of
    the bookkeeping files.

    Args:
        root: The run directory.
    """

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)
        self.before = _stats(self.root)
        self.saved = {rel: (self.root / rel).read_bytes() for rel in BOOKKEEPING if rel in self.before}

    def _changes(self, logs: Iterable[str | os.PathLike]) -> tuple[list[str], list[str], list[str], list[str]]:
        """``(bookkeeping changed, logs grown or new, new empty files, anything else changed)``."""
        now = _stats(self.root)
        log_rel = set()
        for p in logs:
            try:
                log_rel.add(str(Path(p).resolve().relative_to(self.root.resolve())))
            except ValueError:
                continue
        book, grown, empty, other = [], [], [], []
        for rel in sorted(set(self.before) | set(now)):
            old, new = self.before.get(rel), now.get(rel)
            if old == new:
                continue
            if rel in BOOKKEEPING:
                book.append(rel)
            elif rel in log_rel and new is not None and (old is None or new[0] >= old[0]):
                grown.append(rel)
            elif old is None and new is not None and new[0] == 0:
                empty.append(rel)
            else:
                other.append(rel)
        return book, grown, empty, other

    def changed(self, logs: Iterable[str | os.PathLike] = ()) -> list[str]:
        """The files a start changed besides the bookkeeping, the job logs and new empty files
        (relative paths; empty: :meth:`restore` may put the directory back)."""
        return self._changes(logs)[3]

    def restore(self, logs: Iterable[str | os.PathLike] = ()) -> bool:
        """Put the directory back as it was, when the start changed nothing but the bookkeeping
        files, the job logs ``logs`` (appended to) and new empty files.

        Args:
            logs: Log files the start may have appended to (cut back to their old length, or
                removed when they are new).

        Returns:
            Whether the directory was put back (``False``: it holds other changes; nothing done).
        """
        logs = list(logs)
        book, grown, empty, other = self._changes(logs)
        if other:
            return False
        for rel in book:
            path = self.root / rel
            if rel in self.saved:
                tmp = path.with_name(f".{path.name}.restore.tmp")
                path.parent.mkdir(parents=True, exist_ok=True)
                tmp.write_bytes(self.saved[rel])
                os.replace(tmp, path)
            else:
                path.unlink(missing_ok=True)
        for rel in grown:
            path = self.root / rel
            if rel in self.before:
                os.truncate(path, self.before[rel][0])
            else:
                path.unlink(missing_ok=True)
        for rel in empty:
            (self.root / rel).unlink(missing_ok=True)
        hydra = self.root / ".hydra"
        if hydra.is_dir() and not any(hydra.iterdir()) and not any(r.startswith(".hydra/") for r in self.before):
            hydra.rmdir()
        return True
