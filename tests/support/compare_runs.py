"""Compare two run directories file by file, ignoring only times and the git revision.

Used to check that a refactoring leaves a pipeline's outputs byte-identical (same config, same
LLM cache)::

    python tests/support/compare_runs.py /tmp/rehome/base /tmp/rehome/after

Every file must exist in both trees. ``git.json`` is skipped; ``*.log`` files are skipped (they
hold timestamps and progress bars). JSON and JSONL files are compared as data with every key
that names a time (:data:`TIME_KEYS`, or a key ending in ``_s``, ``_seconds``, ``_at`` or
``_time``) dropped at any depth, and with the two run directories' paths made equal; other files
(parquet, PNG, HTML, text) are compared byte for byte after the same path substitution for text.
Prints one line per differing file and exits 1 if any differ.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

SKIP_NAMES = {"git.json"}
SKIP_SUFFIXES = {".log"}
TIME_KEYS = {"elapsed", "seconds", "time", "timestamp", "started", "finished", "created", "date",
             "duration", "wall", "wall_s", "timings", "timing", "git", "revision", "commit",
             "tok_s", "tokens_per_s"}
_TIME_KEY = re.compile(r"(^|_)(s|seconds|at|time|times|timings|per_s|per_second|sec)$")


def _is_time_key(key: str) -> bool:
    k = str(key).lower()
    return k in TIME_KEYS or bool(_TIME_KEY.search(k))


def _scrub(value, a: str, b: str):
    """Drop time keys at any depth; write run-directory ``b``'s path as ``a``'s."""
    if isinstance(value, dict):
        return {k: _scrub(v, a, b) for k, v in value.items() if not _is_time_key(k)}
    if isinstance(value, list):
        return [_scrub(v, a, b) for v in value]
    if isinstance(value, str):
        return value.replace(b, a)
    return value


def _load(path: Path, a: str, b: str):
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".jsonl":
        return [_scrub(json.loads(line), a, b) for line in text.splitlines() if line.strip()]
    return _scrub(json.loads(text), a, b)


def compare(a: Path, b: Path) -> list[str]:
    """Lines naming each file that differs between run directories ``a`` and ``b``."""
    files_a = {p.relative_to(a) for p in a.rglob("*") if p.is_file()}
    files_b = {p.relative_to(b) for p in b.rglob("*") if p.is_file()}
    out = [f"only in {a}: {p}" for p in sorted(files_a - files_b)]
    out += [f"only in {b}: {p}" for p in sorted(files_b - files_a)]
    for rel in sorted(files_a & files_b):
        if rel.name in SKIP_NAMES or rel.suffix in SKIP_SUFFIXES:
            continue
        pa, pb = a / rel, b / rel
        if pa.suffix in (".json", ".jsonl"):
            try:
                same = _load(pa, str(a), str(b)) == _load(pb, str(a), str(b))
            except (ValueError, UnicodeDecodeError):
                same = pa.read_bytes() == pb.read_bytes()
        else:
            ba, bb = pa.read_bytes(), pb.read_bytes()
            same = ba == bb or ba == bb.replace(str(b).encode(), str(a).encode())
        if not same:
            out.append(f"differs: {rel}")
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: compare_runs.py RUN_A RUN_B", file=sys.stderr)
        return 2
    diffs = compare(Path(argv[0]), Path(argv[1]))
    for line in diffs:
        print(line)
    print(f"{len(diffs)} difference(s)")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
