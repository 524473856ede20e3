"""Append-only segment files: the LLM cache's store for millions of samples.

Layout of a cache folder ``root``::

    root/<host>-<pid>-<ns>-<rand>.seg   one per writer process (a SLURM array task, a local run)
    root/ab/<sha256>.json               the old one-file-per-sample format (read, never written)

A segment is a sequence of records, each a 45-byte header and a payload::

    b"MBSR"  flags:u8  key:32 bytes (raw SHA-256)  length:u32  crc32:u32   payload (JSON, zlib if flag 1)

Every process appends only to segments it created itself (``O_EXCL``), so writers on many
nodes never lock, and a record is written with one ``write()`` so a sample handed to
:meth:`SegmentStore.put` is on the file system even if the process is killed right after.
A writer that closes cleanly *seals* its segment: it appends a footer index (``key:32,
offset:u64`` per record, then ``b"MBSFOOT1" offset:u64 count:u64``), so opening the cache
reads one block per sealed segment instead of walking its records. Segments of killed or
still-running writers have no footer; they are walked header by header (a seek per record)
up to the last complete record, so a torn tail is ignored; a damaged header is skipped to the
next intact record with a warning that counts the records dropped (:func:`walk`). Every read checks the full key and
the CRC, so a damaged record is a miss (the sample is generated again), never wrong text.

Lookups go through an in-memory dict from the first 8 key bytes to ``(segment, offset)``
(about 100 bytes per entry; a 64-bit prefix collision only costs a miss). Nothing here uses
file locks (unreliable on NFS and often disabled on Lustre); sqlite and LMDB were rejected
for that reason, and one file per writer keeps every write a plain append.

``python -m mbs.llm.segments compact ROOT`` (console script ``mbs-cache``) rewrites sealed and
idle segments and old-format files into few sealed segments of up to 1M samples, dropping
duplicates and damaged records; see :func:`compact`.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import secrets
import socket
import struct
import sys
import time
import zlib
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mbs.llm.prefix_index import PrefixIndex

log = logging.getLogger(__name__)

MAGIC = b"MBSR"
HEADER = struct.Struct("<4sB32sII")  # magic, flags, key, payload length, crc32 of the payload
FOOT_ENTRY = struct.Struct("<32sQ")  # key, record offset
TRAILER = struct.Struct("<8sQQ")  # magic, offset of the footer index, entry count
FOOT_MAGIC = b"MBSFOOT1"
SUFFIX = ".seg"
#: Payloads longer than this many bytes are zlib-compressed (rollout text compresses ~3x).
COMPRESS_OVER = 256
#: A writer starts a new segment after this many records or bytes.
SEGMENT_MAX_RECORDS = 1_000_000
SEGMENT_MAX_BYTES = 4 << 30
#: Bytes read at once for a lookup (a compressed 2 KB rollout fits).
READ_AHEAD = 4096
#: Open segment files kept per reader.
MAX_OPEN = 64
_FLAG_ZLIB = 1


def encode(key: bytes, value: dict[str, Any]) -> bytes:
    """One record (header and payload) for ``value`` under the raw 32-byte ``key``."""
    payload = json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    flags = 0
    if len(payload) > COMPRESS_OVER:
        payload, flags = zlib.compress(payload, 1), _FLAG_ZLIB
    return HEADER.pack(MAGIC, flags, key, len(payload), zlib.crc32(payload)) + payload


def _decode(flags: int, payload: bytes) -> dict[str, Any]:
    if flags & _FLAG_ZLIB:
        payload = zlib.decompress(payload)
    return json.loads(payload)


class _Segment:
    """What a reader knows about one segment file."""

    __slots__ = ("end", "path", "sealed", "size")

    def __init__(self, path: Path):
        self.path = path
        self.sealed = False
        self.end = 0  # offset after the last complete record read so far
        self.size = -1


def read_footer(fd: int, size: int) -> list[tuple[bytes, int]] | None:
    """The footer index of a sealed segment as ``[(key, offset), ...]``, or ``None`` if unsealed."""
    if size < TRAILER.size:
        return None
    magic, start, count = TRAILER.unpack(os.pread(fd, TRAILER.size, size - TRAILER.size))
    if magic != FOOT_MAGIC or start + count * FOOT_ENTRY.size + TRAILER.size != size:
        return None
    block = os.pread(fd, count * FOOT_ENTRY.size, start)
    return list(FOOT_ENTRY.iter_unpack(block)) if len(block) == count * FOOT_ENTRY.size else None


def walk(fd: int, start: int, size: int, path: Path | str = "?") -> Iterator[tuple[bytes, int, int]]:
    """Yield ``(key, offset, end)`` of each complete record from ``start`` up to a torn tail or ``size``.

    A damaged header (bad magic, or a length running past the file while intact records
    follow) does not end the walk: it goes on at the next intact record (magic, length and
    CRC checked) and logs a warning naming ``path``, the offset and how many records it
    dropped (their samples are generated again). A torn tail (a killed or still-writing
    writer) and the footer of a segment sealed since the last walk end it quietly.
    """
    off = start
    prev: int | None = None  # the last record yielded (its length may be the damaged field)
    while off + HEADER.size <= size:
        head = os.pread(fd, HEADER.size, off)
        if len(head) < HEADER.size:
            return
        magic, _flags, key, length, _crc = HEADER.unpack(head)
        end = off + HEADER.size + length
        if magic != MAGIC or end > size:
            if magic != MAGIC and _footer_start(fd, size) == off:
                return  # sealed since the last walk
            nxt = _resync(fd, (prev if prev is not None else off) + 1, size)
            if nxt is None:
                return  # a torn tail: nothing intact after it
            lost_from = off if nxt > off or prev is None else prev  # before off: prev's length was damaged
            dropped = max(1, _count_magic(fd, lost_from, nxt))
            log.warning(
                "cache segment %s: damaged record header at offset %d; dropped %d record(s) (%d bytes) up to "
                "the next intact record at offset %d (their samples will be generated again)",
                path, lost_from, dropped, nxt - lost_from, nxt,
            )
            off, prev = nxt, None
            continue
        yield key, off, end
        prev, off = off, end


def _footer_start(fd: int, size: int) -> int | None:
    """Where the footer index of a sealed segment starts (``None``: no valid trailer)."""
    if size < TRAILER.size:
        return None
    magic, start, count = TRAILER.unpack(os.pread(fd, TRAILER.size, size - TRAILER.size))
    return start if magic == FOOT_MAGIC and start + count * FOOT_ENTRY.size + TRAILER.size == size else None


def _intact(fd: int, off: int, size: int) -> bool:
    head = os.pread(fd, HEADER.size, off)
    if len(head) < HEADER.size:
        return False
    magic, _flags, _key, length, crc = HEADER.unpack(head)
    if magic != MAGIC or off + HEADER.size + length > size:
        return False
    return zlib.crc32(os.pread(fd, length, off + HEADER.size)) == crc


def _resync(fd: int, start: int, size: int, chunk: int = 1 << 20) -> int | None:
    """Offset of the first intact record at or after ``start`` (``None``: none before ``size``)."""
    pos = start
    while pos + HEADER.size <= size:
        block = os.pread(fd, min(chunk + len(MAGIC) - 1, size - pos), pos)
        i = block.find(MAGIC)
        while 0 <= i < chunk:
            if _intact(fd, pos + i, size):
                return pos + i
            i = block.find(MAGIC, i + 1)
        pos += chunk
    return None


def _count_magic(fd: int, start: int, end: int) -> int:
    """Record starts (the magic) in ``[start, end)``: the records a damaged span held."""
    return os.pread(fd, max(end - start, 0), start).count(MAGIC) if end > start else 0


class SegmentStore:
    """A folder of append-only segments; each process writes its own, reads everyone's.

    Args:
        root: Cache folder (created if missing).
        refresh_s: On a miss, look for new segments and records of other writers at most this
            often (seconds); ``0`` looks on every miss.

    Raises:
        OSError: The folder cannot be created or listed.
    """

    def __init__(self, root: str | os.PathLike, refresh_s: float = 1.0):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.refresh_s = float(refresh_s)
        self._segments: list[_Segment] = []
        self._by_path: dict[Path, int] = {}
        self._index = PrefixIndex()  # key prefix -> segment number << 40 | offset
        self._fds: OrderedDict[int, int] = OrderedDict()
        self._last_refresh = 0.0
        self._writer: SegmentWriter | None = None
        self._wseg = -1
        self.refresh()

    # ----------------------------------------------------------------- reading
    def refresh(self) -> None:
        """Index segments and records that appeared since the last refresh (other writers)."""
        self._last_refresh = time.monotonic()
        for path in sorted(self.root.glob("*" + SUFFIX)):
            if path not in self._by_path:
                self._by_path[path] = len(self._segments)
                self._segments.append(_Segment(path))
        for no, seg in enumerate(self._segments):
            if seg.sealed or no == self._wseg:
                continue
            try:
                size = seg.path.stat().st_size
            except FileNotFoundError:  # compacted away
                seg.sealed, seg.end = True, 0
                continue
            if size == seg.size:
                continue
            seg.size = size
            fd = self._fd(no)
            if fd is None:
                continue
            footer = read_footer(fd, size) if seg.end == 0 else None
            if footer is not None:
                seg.sealed = True
                self._index.add_footer(footer, no)
                continue
            for key, off, end in walk(fd, seg.end, size, seg.path):
                self._index.setdefault(PrefixIndex.prefix(key), no << 40 | off)
                seg.end = end

    def _fd(self, no: int) -> int | None:
        fd = self._fds.get(no)
        if fd is not None:
            self._fds.move_to_end(no)
            return fd
        try:
            fd = os.open(self._segments[no].path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        self._fds[no] = fd
        while len(self._fds) > MAX_OPEN:
            os.close(self._fds.popitem(last=False)[1])
        return fd

    def get(self, key: str) -> dict[str, Any] | None:
        """The value stored under the hex ``key``, or ``None`` (also for a damaged record, logged)."""
        raw = bytes.fromhex(key)
        prefix = PrefixIndex.prefix(raw)
        loc = self._index.get(prefix)
        if loc is None and self.refresh_s >= 0 and time.monotonic() - self._last_refresh >= self.refresh_s:
            self.refresh()
            loc = self._index.get(prefix)
        if loc is None:
            return None
        return self._read(loc >> 40, loc & ((1 << 40) - 1), raw)

    def _read(self, no: int, off: int, raw: bytes) -> dict[str, Any] | None:
        fd = self._fd(no)
        if fd is None:
            return None
        head = os.pread(fd, READ_AHEAD, off)  # header and (usually) the whole payload in one read
        if len(head) < HEADER.size:
            return None
        magic, flags, key, length, crc = HEADER.unpack_from(head)
        if key != raw:
            return None  # a 64-bit prefix collision: a miss, never another sample's text
        payload = head[HEADER.size : HEADER.size + length]
        if len(payload) < length:
            payload += os.pread(fd, length - len(payload), off + len(head))
        if magic != MAGIC or len(payload) != length or zlib.crc32(payload) != crc:
            log.warning("ignoring damaged cache record at %s:%d", self._segments[no].path, off)
            return None
        try:
            return _decode(flags, payload)
        except (zlib.error, ValueError) as err:
            log.warning("ignoring unreadable cache record at %s:%d: %s", self._segments[no].path, off, err)
            return None

    def __contains__(self, key: str) -> bool:
        return PrefixIndex.prefix(bytes.fromhex(key)) in self._index

    def __len__(self) -> int:
        return len(self._index)

    # ----------------------------------------------------------------- writing
    def put(self, key: str, value: dict[str, Any]) -> None:
        """Append ``value`` under the hex ``key`` to this process's segment (one ``write()``).

        Raises:
            OSError: The write failed (the segment is abandoned; the next put starts a new one).
        """
        raw = bytes.fromhex(key)
        w = self._writer
        if w is not None and w.pid != os.getpid():  # forked: leave the parent's segment alone
            self._writer, self._wseg, w = None, -1, None
        if w is None or w.full:
            self.seal()
            w = self._writer = SegmentWriter(self.root)
            self._wseg = len(self._segments)
            self._by_path[w.path] = self._wseg
            self._segments.append(_Segment(w.path))
        try:
            off = w.append(raw, encode(raw, value))
        except OSError:
            self._finish(seal=False)
            raise
        self._index.set(PrefixIndex.prefix(raw), self._wseg << 40 | off)

    def _finish(self, seal: bool) -> None:
        w = self._writer
        if w is None:
            return
        if seal:
            w.seal()
        else:
            w.abandon()
        seg = self._segments[self._wseg]
        seg.sealed, seg.end = True, w.bytes
        self._writer, self._wseg = None, -1

    def seal(self) -> None:
        """Append the footer index to this process's segment and stop writing to it."""
        self._finish(seal=True)

    def close(self) -> None:
        """Seal this process's segment and close every file."""
        self.seal()
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    def __del__(self):  # best effort: an unsealed segment is still complete, just slower to open
        try:
            self.close()
        except Exception:  # noqa: BLE001
            pass


class SegmentWriter:
    """One new segment file in ``root``, appended to by this process only.

    Raises:
        OSError: The file cannot be created.
    """

    def __init__(self, root: Path):
        name = f"{socket.gethostname()}-{os.getpid()}-{time.time_ns()}-{secrets.token_hex(3)}{SUFFIX}"
        self.path = Path(root) / name
        self.fd: int | None = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
        self.footer = bytearray()  # FOOT_ENTRY per record, packed as written: 40 bytes a sample in memory
        self.records = 0
        self.bytes = 0
        self.pid = os.getpid()  # a forked child never writes to or seals its parent's segment

    @property
    def full(self) -> bool:
        """Whether the segment reached :data:`SEGMENT_MAX_RECORDS` or :data:`SEGMENT_MAX_BYTES`."""
        return self.records >= SEGMENT_MAX_RECORDS or self.bytes >= SEGMENT_MAX_BYTES

    def append(self, key: bytes, rec: bytes) -> int:
        """Write one encoded record with a single ``write()``; returns its offset.

        Raises:
            OSError: The write failed or was short (call :meth:`abandon`).
        """
        off = self.bytes
        written = os.write(self.fd, rec)
        if written != len(rec):
            raise OSError(f"short write to {self.path} ({written} of {len(rec)} bytes)")
        self.bytes += len(rec)
        self.footer += FOOT_ENTRY.pack(key, off)
        self.records += 1
        return off

    def seal(self) -> None:
        """Append the footer index and close (a failed seal leaves a readable unsealed segment)."""
        if self.fd is None or self.pid != os.getpid():
            return
        try:
            os.write(self.fd, bytes(self.footer) + TRAILER.pack(FOOT_MAGIC, self.bytes, self.records))
        except OSError as err:
            log.warning("could not seal cache segment %s: %s", self.path, err)
        self.abandon()

    def abandon(self) -> None:
        """Close without a footer (after a failed write: the tail may be torn)."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


# --------------------------------------------------------------------- compaction
def _records(path: Path) -> Iterator[tuple[bytes, bytes]]:
    """``(key, whole record)`` of every complete record of a segment with a valid CRC."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        footer = read_footer(fd, size)
        end = footer_start = None
        if footer is not None:
            footer_start = TRAILER.unpack(os.pread(fd, TRAILER.size, size - TRAILER.size))[1]
        for key, off, end in walk(fd, 0, footer_start if footer_start is not None else size, path):
            rec = os.pread(fd, end - off, off)
            _m, _f, _k, _length, crc = HEADER.unpack_from(rec)
            if zlib.crc32(rec[HEADER.size :]) == crc:
                yield key, rec
            else:
                log.warning("compact: dropping damaged record at %s:%d", path, off)
    finally:
        os.close(fd)


def iter_entries(root: str | os.PathLike) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every intact record of every segment in ``root`` as ``(hex key, value)`` (duplicates included)."""
    for path in sorted(Path(root).glob("*" + SUFFIX)):
        for key, rec in _records(path):
            _m, flags, _k, _length, _crc = HEADER.unpack_from(rec)
            yield key.hex(), _decode(flags, rec[HEADER.size :])


def legacy_files(root: Path) -> Iterator[Path]:
    """Entries of the old one-file-per-sample format (``root/ab/<sha256>.json``)."""
    for sub in sorted(root.iterdir()):
        if len(sub.name) == 2 and sub.is_dir():
            yield from sorted(p for p in sub.glob("*.json") if len(p.stem) == 64)


def compact(root: str | os.PathLike, idle_s: float = 6 * 3600.0, legacy: bool = True) -> dict[str, int]:
    """Rewrite a cache folder into few sealed segments (drops duplicates and damaged records).

    Takes every sealed segment, every unsealed one not modified for ``idle_s`` seconds (a
    killed writer's; a running writer's stays untouched), and, with ``legacy``, every file of
    the old one-file-per-sample format (migrating it). The new segments are written and
    sealed before any input is removed, so a kill at any point loses nothing (at worst both
    copies stay). Readers that opened the cache before keep working: a record whose segment
    was removed is a miss until their next refresh. Run one compaction per folder at a time
    (guarded by ``root/.compact.lock``; remove it if a compaction was killed).

    Returns:
        Counts: ``segments_in``, ``legacy_in``, ``records_in``, ``records_out``, ``segments_out``.

    Raises:
        FileExistsError: Another compaction holds the lock.
    """
    root = Path(root)
    lock = root / ".compact.lock"
    fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    os.write(fd, f"{socket.gethostname()} {os.getpid()}\n".encode())
    os.close(fd)
    try:
        now = time.time()
        inputs = []
        for path in sorted(root.glob("*" + SUFFIX)):
            with open(path, "rb") as f:
                sealed = read_footer(f.fileno(), os.fstat(f.fileno()).st_size) is not None
            if sealed or now - path.stat().st_mtime >= idle_s:
                inputs.append(path)
        old = list(legacy_files(root)) if legacy else []
        seen: set[bytes] = set()
        counts = {"segments_in": len(inputs), "legacy_in": len(old), "records_in": 0, "records_out": 0,
                  "segments_out": 0}
        writer: SegmentWriter | None = None

        def add(key: bytes, rec: bytes) -> None:
            nonlocal writer
            if writer is None or writer.full:
                if writer is not None:
                    writer.seal()
                writer = SegmentWriter(root)
                counts["segments_out"] += 1
            writer.append(key, rec)
            seen.add(key)

        for path in inputs:
            for key, rec in _records(path):
                counts["records_in"] += 1
                if key not in seen:
                    add(key, rec)
        for path in old:
            counts["records_in"] += 1
            key = bytes.fromhex(path.stem)
            if key in seen:
                continue
            try:
                value = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError) as err:
                log.warning("compact: dropping unreadable old-format entry %s: %s", path, err)
                continue
            add(key, encode(key, value))
        if writer is not None:
            writer.seal()
        counts["records_out"] = len(seen)
        for path in inputs:
            path.unlink(missing_ok=True)
        for path in old:
            path.unlink(missing_ok=True)
        for sub in {p.parent for p in old}:
            try:
                sub.rmdir()
            except OSError:  # not empty (a temp file of a running old writer): leave it
                pass
        return counts
    finally:
        lock.unlink(missing_ok=True)


def stats(root: str | os.PathLike) -> dict[str, int]:
    """Entries, segments (sealed/unsealed), old-format files and bytes on disk of a cache folder."""
    root = Path(root)
    store = SegmentStore(root, refresh_s=-1)
    try:
        segs = store._segments
        return {
            "entries": len(store),
            "segments": len(segs),
            "sealed": sum(s.sealed for s in segs),
            "legacy_files": sum(1 for _ in legacy_files(root)),
            "bytes": sum(p.stat().st_size for p in root.rglob("*") if p.is_file()),
        }
    finally:
        store.close()


def main(argv: list[str] | None = None) -> int:
    """``mbs-cache {compact,stats} ROOT``: maintain an LLM cache folder (see the module docstring)."""
    ap = argparse.ArgumentParser(prog="mbs-cache", description="Maintain an mbs LLM cache folder (paths.cache_dir).")
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("compact", help="merge segments and old-format files into few sealed segments")
    c.add_argument("root")
    c.add_argument("--idle-s", type=float, default=6 * 3600.0,
                   help="take unsealed segments only if unmodified for this many seconds (default 6 h)")
    c.add_argument("--no-legacy", action="store_true", help="leave old one-file-per-sample entries alone")
    s = sub.add_parser("stats", help="print entries, segments, files and bytes")
    s.add_argument("root")
    args = ap.parse_args(argv)
    if not Path(args.root).is_dir():
        print(f"mbs-cache: {args.root}: no such cache folder", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.cmd == "compact":
        try:
            print(json.dumps(compact(args.root, idle_s=args.idle_s, legacy=not args.no_legacy)))
        except FileExistsError:
            print(f"mbs-cache: {args.root}/.compact.lock exists: another compaction runs (or was killed: remove it)",
                  file=sys.stderr)
            return 2
    else:
        print(json.dumps(stats(args.root)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
