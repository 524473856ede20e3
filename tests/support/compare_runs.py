"""Compare two run directories file by file, ignoring only times and the git revision.

Used to check that a refactoring leaves a pipeline's outputs byte-identical (same config, same
LLM cache)::

    python tests/support/compare_runs.py /tmp/rehome/base /tmp/rehome/after

Every file must exist in both trees. ``git.json`` is skipped, and so are ``*.log`` and ``*.lock``
files (timestamps, progress bars, process ids). JSON, JSONL and parquet files (schema and rows)
are compared as data with every key
that names a time (:data:`TIME_KEYS`, or a key ending in ``_s``, ``_seconds``, ``_at`` or
``_time``) dropped at any depth, and with the two run directories' paths made equal; other files
(PNG, PDF, YAML) are compared byte for byte after the same path substitution, and reports
(HTML, Markdown, TeX) likewise with durations written as text ("3 min 45 s") masked; a
manifest's file list is compared by name (the sizes follow the times inside those files).
Run both pipelines from the same source folder into folders of equal name length, so that the
paths and the file sizes in manifests agree.
Prints one line per differing file and exits 1 if any differ.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

SKIP_NAMES = {"git.json"}
SKIP_SUFFIXES = {".log", ".lock"}
TIME_KEYS = {"elapsed", "seconds", "time", "timestamp", "started", "finished", "created", "date",
             "duration", "wall", "wall_s", "timings", "timing", "git", "revision", "commit",
             "tok_s", "tokens_per_s"}
_TIME_KEY = re.compile(r"(^|_)(s|seconds|at|time|times|timings|runtime|per_s|per_second|sec)$")


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


#: Durations written as text ("3 min 45 s", "9.8 s", "1 h 2 min") in reports, masked before comparing.
_DURATION = re.compile(r"\b\d+(?:\.\d+)? ?(?:h|min|s)\b(?: \d+(?:\.\d+)? ?(?:h|min|s)\b)*")


def _load(path: Path, a: str, b: str):
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        table = pq.read_table(path)
        return [str(table.schema), _scrub(table.to_pylist(), a, b)]
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".jsonl":
        return [_scrub(json.loads(line), a, b) for line in text.splitlines() if line.strip()]
    data = _scrub(json.loads(text), a, b)
    if path.name == "manifest.json" and isinstance(data.get("files"), dict):
        data["files"] = sorted(data["files"])  # sizes follow the times written in those files
    return data


def compare(a: Path, b: Path) -> list[str]:
    """Lines naming each file that differs between run directories ``a`` and ``b``."""
    files_a = {p.relative_to(a) for p in a.rglob("*") if p.is_file()}
    files_b = {p.relative_to(b) for p in b.rglob("*") if p.is_file()}
    out = [f"only in {a}: {p}" for p in sorted(files_a - files_b)]
    out += [f"only in {b}: {p}" for p in sorted(files_b - files_a)]
    for rel in sorted(files_a & files_b):
        if rel.name in SKIP_NAMES or rel.name.endswith(tuple(SKIP_SUFFIXES)):
            continue
        pa, pb = a / rel, b / rel
        if pa.suffix in (".json", ".jsonl", ".parquet"):
            try:
                same = _load(pa, str(a), str(b)) == _load(pb, str(a), str(b))
            except (ValueError, UnicodeDecodeError):
                same = pa.read_bytes() == pb.read_bytes()
        elif pa.suffix in (".html", ".md", ".txt", ".tex"):
            ta, tb = pa.read_text(encoding="utf-8"), pb.read_text(encoding="utf-8").replace(str(b), str(a))
            same = _DURATION.sub("<t>", ta) == _DURATION.sub("<t>", tb)
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
