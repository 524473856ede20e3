"""The LLM cache's segment store: reopen, torn tails, damage, old format, compaction, kill -9."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from support.cache_writer import key, value

from mbs.llm.base import ChatRequest
from mbs.llm.cache import FilePerSampleCache, ResponseCache, cache_key
from mbs.llm.segments import SUFFIX, SegmentStore, compact, main, stats

WRITER = Path(__file__).resolve().parents[1] / "support" / "cache_writer.py"


def segments(root: Path) -> list[Path]:
    return sorted(root.glob("*" + SUFFIX))


def fill(store, writer: int, count: int) -> None:
    for i in range(count):
        store.put(key(writer, i), value(writer, i))


def test_key_is_unchanged_from_the_file_per_sample_store():
    req = ChatRequest(messages=[{"role": "user", "content": "2+2?"}], n=4, max_tokens=64, seed=7)
    # computed by the previous release: existing caches keep their hits
    assert cache_key("llamacpp", "m@sha256:0", req, 3) == "58c7ce15cd604fc2d680cdf492bdda985b6c27777afd01c6895013ceb8608f5b"


@pytest.mark.parametrize("sealed", [True, False])
def test_reopened_store_serves_every_sample_from_one_file(tmp_path, sealed):
    store = SegmentStore(tmp_path)
    fill(store, 0, 500)
    if sealed:
        store.close()
    again = SegmentStore(tmp_path)
    assert len(again) == 500 and len(segments(tmp_path)) == 1
    assert all(again.get(key(0, i)) == value(0, i) for i in range(500))
    assert again.get(key(1, 0)) is None


def test_other_writers_samples_are_seen_on_a_miss(tmp_path):
    reader = SegmentStore(tmp_path, refresh_s=0)
    writer = SegmentStore(tmp_path)
    fill(writer, 3, 10)
    assert reader.get(key(3, 9)) == value(3, 9)  # new segment found
    writer.put(key(3, 10), value(3, 10))
    assert reader.get(key(3, 10)) == value(3, 10)  # grown segment read from where it was left


def test_torn_tail_is_ignored_and_the_rest_stays_readable(tmp_path):
    store = SegmentStore(tmp_path)
    fill(store, 0, 20)
    (seg,) = segments(tmp_path)
    size = seg.stat().st_size
    os.truncate(seg, size - 7)  # a writer killed in the middle of its last record
    again = SegmentStore(tmp_path)
    assert len(again) == 19 and again.get(key(0, 19)) is None
    assert [again.get(key(0, i)) for i in range(19)] == [value(0, i) for i in range(19)]
    fill(again, 1, 3)  # a new writer appends to its own new segment, never after a torn tail
    assert len(segments(tmp_path)) == 2 and SegmentStore(tmp_path).get(key(1, 2)) == value(1, 2)


def test_a_damaged_record_is_a_miss_not_wrong_text(tmp_path, caplog):
    store = SegmentStore(tmp_path)
    fill(store, 0, 5)
    store.close()
    (seg,) = segments(tmp_path)
    data = bytearray(seg.read_bytes())
    data[60] ^= 0xFF  # inside the first record's payload
    seg.write_bytes(bytes(data))
    again = SegmentStore(tmp_path)
    assert again.get(key(0, 0)) is None and "damaged" in caplog.text
    assert again.get(key(0, 4)) == value(0, 4)


def test_old_format_is_read_and_compaction_migrates_it(tmp_path):
    old = FilePerSampleCache(tmp_path)
    for i in range(30):
        old.put(key(9, i), value(9, i))
    cache = ResponseCache(tmp_path)
    assert cache.get(key(9, 29)) == value(9, 29)
    fill(cache, 0, 40)
    fill(cache, 9, 10)  # duplicates of old entries
    cache.close()
    counts = compact(tmp_path)
    assert counts == {"segments_in": 1, "legacy_in": 30, "records_in": 80, "records_out": 70, "segments_out": 1}
    assert [p.name for p in tmp_path.iterdir()] == [segments(tmp_path)[0].name]  # old folders gone
    after = ResponseCache(tmp_path)
    assert after.legacy is None and len(after) == 70
    assert all(after.get(key(9, i)) == value(9, i) for i in range(30))
    assert stats(tmp_path)["sealed"] == 1


def test_compaction_leaves_a_running_writers_segment_alone(tmp_path):
    done = SegmentStore(tmp_path)
    fill(done, 0, 10)
    done.close()
    running = SegmentStore(tmp_path)
    fill(running, 1, 10)  # unsealed and just modified
    counts = compact(tmp_path, idle_s=3600)
    assert counts["segments_in"] == 1 and counts["records_out"] == 10
    fill(running, 2, 5)
    running.close()
    assert len(SegmentStore(tmp_path)) == 25


def test_cli_names_a_missing_folder(tmp_path, capsys):
    assert main(["compact", str(tmp_path / "nope")]) == 2
    assert "no such cache folder" in capsys.readouterr().err


def _writer(root: Path, wid: int, count: int, delay: float, **env) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(WRITER), str(root), str(wid), str(count), str(delay)],
        stdout=subprocess.PIPE, text=True, env={**os.environ, **env},
    )


def test_concurrent_writers_and_a_kill_9_lose_no_put_sample(tmp_path):
    procs = [_writer(tmp_path, w, 400 if w else 100_000, 0.0 if w else 0.001) for w in range(4)]
    victim = procs[0]
    reported = []
    for line in victim.stdout:  # let it write a while, then SIGKILL it mid-stream
        reported.append(int(line))
        if len(reported) == 300:
            victim.send_signal(signal.SIGKILL)
            break
    reported += [int(line) for line in victim.stdout]  # what it printed before dying
    victim.wait()
    assert victim.returncode == -signal.SIGKILL
    for p in procs[1:]:
        p.communicate(timeout=120)
        assert p.returncode == 0
    cache = ResponseCache(tmp_path)
    assert len(segments(tmp_path)) == 4
    for w in (1, 2, 3):
        assert [cache.get(key(w, i)) for i in range(400)] == [value(w, i) for i in range(400)]
    # every sample the killed writer reported is there and intact; nothing else of it is
    assert [cache.get(key(0, i)) for i in reported] == [value(0, i) for i in reported]
    assert len(cache) in (1200 + len(reported), 1200 + len(reported) + 1)  # +1: written, not yet reported
    counts = compact(tmp_path, idle_s=0)
    assert counts["records_out"] == len(cache) and len(segments(tmp_path)) == 1
    after = ResponseCache(tmp_path)
    assert [after.get(key(0, i)) for i in reported] == [value(0, i) for i in reported]


def test_a_forked_child_does_not_seal_its_parents_segment(tmp_path):
    store = SegmentStore(tmp_path)
    fill(store, 0, 3)
    pid = os.fork()
    if pid == 0:  # the child closes its copy (as an exiting worker's interpreter would)
        store.close()
        os._exit(0)
    os.waitpid(pid, 0)
    fill(store, 0, 6)
    store.close()
    assert len(SegmentStore(tmp_path)) == 6 and stats(tmp_path)["sealed"] == 1


def test_prefix_index_answers_like_a_dict_through_merges_and_footers():
    import random

    from mbs.llm.prefix_index import PrefixIndex

    rng = random.Random(0)
    idx, ref = PrefixIndex(merge_at=64), {}
    keys = [rng.randbytes(32) for _ in range(3000)]
    keys += keys[:200]  # keys written again
    for step in range(4):
        chunk = keys[step * 800 : (step + 1) * 800]
        if step % 2:  # a sealed segment's footer: the first record of a key wins
            entries = [(k, rng.randrange(1 << 30)) for k in chunk]
            idx.add_footer(entries, step)
            for k, off in entries:
                ref.setdefault(PrefixIndex.prefix(k), step << 40 | off)
        else:
            for k in chunk:
                loc = rng.randrange(1 << 40)
                if rng.random() < 0.5:  # another writer's record
                    idx.setdefault(PrefixIndex.prefix(k), loc)
                    ref.setdefault(PrefixIndex.prefix(k), loc)
                else:  # this process's own put: the newest wins
                    idx.set(PrefixIndex.prefix(k), loc)
                    ref[PrefixIndex.prefix(k)] = loc
        assert len(idx) == len(ref)
        assert all(idx.get(PrefixIndex.prefix(k)) == ref.get(PrefixIndex.prefix(k)) for k in keys)
    assert idx.get(PrefixIndex.prefix(rng.randbytes(32))) is None


@pytest.mark.parametrize("field", ["magic", "length"])
def test_a_damaged_header_in_an_unsealed_segment_drops_only_its_record_and_says_so(tmp_path, caplog, field):
    """Issue 30: one damaged header used to drop every later record of the segment, silently."""
    import struct

    from mbs.llm.segments import walk

    store = SegmentStore(tmp_path)  # kept open: its segment stays unsealed (a killed or running writer)
    fill(store, 0, 10)
    (seg,) = segments(tmp_path)
    fd = os.open(seg, os.O_RDONLY)
    try:
        offsets = [off for _key, off, _end in walk(fd, 0, seg.stat().st_size)]
    finally:
        os.close(fd)
    assert len(offsets) == 10
    data = bytearray(seg.read_bytes())
    if field == "magic":
        data[offsets[3]] ^= 0xFF
    else:  # the payload length (after magic, flags and key) now runs past the end of the file
        struct.pack_into("<I", data, offsets[3] + 4 + 1 + 32, 1 << 30)
    damaged = tmp_path / "copy"
    damaged.mkdir()
    (damaged / seg.name).write_bytes(bytes(data))
    again = SegmentStore(damaged)
    assert [again.get(key(0, i)) for i in range(10)] == [value(0, i) if i != 3 else None for i in range(10)]
    assert f"damaged record header at offset {offsets[3]}; dropped 1 record(s)" in caplog.text
    assert str(damaged / seg.name) in caplog.text
    compact(damaged, idle_s=0)  # compaction keeps the nine intact records
    assert stats(damaged)["entries"] == 9
