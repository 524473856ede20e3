"""The LLM cache at scale: today's segment store beside the old one-file-per-sample store.

    python tests/benchmarks/bench_cache_scale.py [--sizes 10000,100000,1000000] [--old-max 100000]
        [--dir /tmp] [--gets 20000]

For each size, in one run, both stores get the same synthetic samples (about 2 KB of rollout
text each, like the issue's measurement: 50,000 entries, 103 MiB of payload): put rate (one
writer process), time to open (the old store: nothing to open; the segment store: sealed with
its footer index, and unsealed as a killed writer leaves it), get rate over ``--gets`` random
stored keys plus as many misses, files created, and bytes on disk (allocated blocks) over
payload bytes (the JSON of the entries). The old store above ``--old-max`` entries is skipped
(1M files take minutes and ~4 GiB of inodes and blocks here); the row says so. Lookups are
from the page cache (this benchmark cannot drop caches); on Lustre/NFS every old-store
get is a metadata round trip, every segment-store get a read of an open file.
Targets: at most one file per 10,000 samples; segment get rate >= old get rate at 100K.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

from mbs.llm.cache import FilePerSampleCache
from mbs.llm.segments import SegmentStore
from mbs.llm.segments import stats as store_stats

WORDS = ["so", "the", "answer", "is", "step", "first", "we", "compute", "then", "since", "therefore", "boxed", "sum", "of", "the", "squares", "let", "x", "y", "n", "be", "integer", "prime", "divides", "modulo", "equation", "hence", "check", "case"]


def payloads(seed: int = 0, pool: int = 500) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(250, 450))) for _ in range(pool)]


def make_key(i: int) -> str:
    import hashlib

    return hashlib.sha256(f"sample {i}".encode()).hexdigest()


def make_value(i: int, texts: list[str]) -> dict:
    return {"text": f"{i}: {texts[i % len(texts)]}", "prompt_tokens": 120, "completion_tokens": 400 + i % 97,
            "finish_reason": "stop" if i % 5 else "length"}


def disk(root: Path) -> tuple[int, int]:
    files = blocks = 0
    for dirpath, _dirs, names in os.walk(root):
        for n in names:
            files += 1
            blocks += os.stat(os.path.join(dirpath, n)).st_blocks * 512
    return files, blocks


def bench(kind: str, n: int, base: Path, texts: list[str], gets: int) -> dict:
    root = base / f"{kind}-{n}"
    keys = [make_key(i) for i in range(n)]
    payload = 0
    store = FilePerSampleCache(root) if kind == "old" else SegmentStore(root)
    t = time.perf_counter()
    for i, k in enumerate(keys):
        v = make_value(i, texts)
        store.put(k, v)
    put_s = time.perf_counter() - t
    payload = sum(len(json.dumps(make_value(i, texts), ensure_ascii=False).encode()) for i in range(n))
    row = {"store": kind, "n": n, "put_per_s": n / put_s}
    if kind == "new":
        # a killed writer's segment (no footer) first, then the sealed one
        t = time.perf_counter()
        unsealed = SegmentStore(root)
        row["open_unsealed_s"] = time.perf_counter() - t
        assert len(unsealed) == n
        unsealed.close()
        store.close()
        del unsealed
        t = time.perf_counter()
        store = SegmentStore(root)
        row["open_s"] = time.perf_counter() - t
        # what a reader holds per sample (mbs.llm.segments.PrefixIndex: arrays, and a dict of the newest)
        row["index_mib"] = store._index.nbytes() / 2**20
        assert len(store) == n
    else:
        t = time.perf_counter()
        store = FilePerSampleCache(root)
        row["open_s"] = time.perf_counter() - t
    rng = random.Random(1)
    sample = [rng.randrange(n) for _ in range(gets)]
    t = time.perf_counter()
    for i in sample:
        assert store.get(keys[i]) is not None
    row["get_per_s"] = gets / (time.perf_counter() - t)
    if kind == "new":
        store.refresh_s = 3600.0  # misses are answered from the index (as within one run)
    t = time.perf_counter()
    for i in range(gets):
        assert store.get(make_key(n + i)) is None
    row["miss_per_s"] = gets / (time.perf_counter() - t)
    files, blocks = disk(root)
    row.update(files=files, samples_per_file=n / files, disk_over_payload=blocks / payload, payload_mib=payload / 2**20)
    if kind == "new":
        store.close()
        row["sealed"] = store_stats(root)["sealed"]
    shutil.rmtree(root)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10000,100000,1000000")
    ap.add_argument("--old-max", type=int, default=100_000, help="largest size run on the old store")
    ap.add_argument("--dir", default=None, help="where the stores are written (default: a temp folder)")
    ap.add_argument("--gets", type=int, default=20_000)
    args = ap.parse_args()
    texts = payloads()
    base = Path(tempfile.mkdtemp(prefix="mbs-cache-bench-", dir=args.dir))
    print(f"load before: {os.getloadavg()[0]:.2f}  dir: {base}")
    rows = []
    try:
        for n in (int(s) for s in args.sizes.split(",")):
            for kind in ("old", "new"):
                if kind == "old" and n > args.old_max:
                    print(f"old store, {n} samples: skipped (--old-max {args.old_max}: {n} files)")
                    continue
                r = bench(kind, n, base, texts, min(args.gets, n))
                r["load"] = os.getloadavg()[0]
                rows.append(r)
                print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in r.items()}), flush=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print()
    print(f"{'n':>8} {'store':>5} {'put/s':>9} {'get/s':>9} {'miss/s':>9} {'open s':>8} {'files':>8} "
          f"{'samples/file':>12} {'disk/payload':>12} {'load':>5}")
    for r in rows:
        print(f"{r['n']:>8} {r['store']:>5} {r['put_per_s']:>9.0f} {r['get_per_s']:>9.0f} {r['miss_per_s']:>9.0f} "
              f"{r['open_s']:>8.3f} {r['files']:>8} {r['samples_per_file']:>12.0f} {r['disk_over_payload']:>12.3f} "
              f"{r['load']:>5.2f}")
    by = {(r["store"], r["n"]): r for r in rows}
    for n in sorted({r["n"] for r in rows}):
        if ("old", n) in by and ("new", n) in by:
            o, w = by[("old", n)], by[("new", n)]
            print(f"n={n}: new/old put rate {w['put_per_s'] / o['put_per_s']:.1f}x, get rate "
                  f"{w['get_per_s'] / o['get_per_s']:.2f}x (target >= 1 at 100K), files {o['files']} -> {w['files']}")
        if ("new", n) in by:
            w = by[("new", n)]
            print(f"n={n}: new store open {w['open_s']:.3f} s sealed, {w['open_unsealed_s']:.3f} s unsealed; "
                  f"index {w['index_mib']:.0f} MiB; {w['samples_per_file']:.0f} samples per file (target >= 10000)")


if __name__ == "__main__":
    main()
