"""Run directories: resolved config, git revision, append-only record shards, manifest last.

Layout of a stage's run directory (``hydra.run.dir``)::

    .lock                  locked (``lockf``) by the one process running a stage here: host, pid, start
    config.yaml            resolved config (secrets are never resolved: env lookups stay as written)
    sampling.json          the config values the records were drawn with (checked on resume;
                           stages that draw: calibrate, synthesize, evaluate)
    git.json               git revision and dirty flag of the code that ran
    <name>.<shard>.jsonl   append-only record shards (one JSON record per line)
    summary.json           the stage's headline numbers
    manifest.json          written last: counts, timings, backend calls, cache hits, files

A stage killed at any point and run again with the same config and ``hydra.run.dir`` resumes:
:meth:`Shard.read` drops a torn last line (a write cut off by the kill) and returns the
finished records, so nothing finished is recomputed or lost and nothing is duplicated.

Guards (:class:`RunDirError` ends the command with exit status 2): a second process opening
a run directory another one holds fails at once, naming the holder (host and pid); a run
whose sampling config (seed, temperature, top_p, templates, policies:
:data:`mbs.stages.config.SAMPLING_KEYS`) differs from the one the directory's records were drawn with is refused unless
``resume.allow_config_change=true``. A run is *admitted* once it holds the lock and its
sampling config is accepted; only then is anything in the directory changed: ``manifest.json``
is removed (it marks a finished stage only), ``sampling.json`` recorded and the hooks of
:func:`on_admit` run (the command line writes Hydra's ``.hydra/`` files and its log there), so
a refused start leaves every file as it was; so does a start that fails after admission but
before writing anything of its own, under :func:`restore_on_failure` (every ``mbs-*`` command:
:mod:`mbs.run_restore`). Derived files are replaced atomically
(:meth:`Shard.rewrite`). The server's address (``base_url``) is not sampling config: the same
model served elsewhere draws the same records.
Every string written to ``config.yaml``, ``summary.json`` and ``manifest.json`` has its URLs
redacted (:mod:`mbs.redact`). Nothing here reads the config: the stage hands a run directory
what it records of it, the sampling config and the text of ``config.yaml``
(:func:`mbs.stages.config.open_run`).

The readers at the bottom (:func:`read_summary`, :func:`read_records`, ...) are the public
interface that ``analysis/`` and ``mbs-figures`` use; they never import stage internals.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

from mbs.records import SCHEMA_VERSION, RecordError, from_dict, to_dict
from mbs.redact import redact_obj
from mbs.run_lock import RunDirError, RunLock
from mbs.run_restore import StartSnapshot

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
SUMMARY = "summary.json"
SAMPLING = "sampling.json"

def write_json_atomic(path: str | os.PathLike, data: Any) -> Path:
    """Write ``data`` as pretty JSON to ``path`` via a temporary file and rename (never torn)."""
    text = json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False, default=_json_default)
    return write_text_atomic(path, text + "\n")


def _json_default(obj: Any) -> Any:
    if isinstance(obj, (set, frozenset)):
        return sorted(obj)
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "item"):  # numpy scalars
        return obj.item()
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def git_revision(cwd: str | os.PathLike | None = None) -> dict[str, Any]:
    """The git commit and dirty flag of the code in ``cwd`` (the mbs source tree by default)."""
    cwd = cwd or Path(__file__).resolve().parent
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
        dirty = bool(
            subprocess.run(
                ["git", "status", "--porcelain", "--untracked-files=no"],
                cwd=cwd,
                capture_output=True,
                text=True,
                timeout=10,
            ).stdout.strip()
        )
        return {"commit": rev, "dirty": dirty}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}


class Shard:
    """An append-only JSONL file of records of one type.

    Args:
        path: The ``.jsonl`` file.
        record_type: Record class for :meth:`read` (``None`` returns plain dicts).
    """

    def __init__(self, path: str | os.PathLike, record_type: type | None = None):
        self.path = Path(path)
        self.record_type = record_type
        self._fh: TextIO | None = None

    def read(self) -> list[Any]:
        """All complete records; a torn last line (killed mid-write) is cut off the file.

        Raises:
            RecordError: A complete line that is not valid JSON or not a valid record
                (names the file and line).
        """
        return list(self.iter())

    def iter(self) -> Iterator[Any]:
        """Stream the complete records, one line in memory at a time (see :meth:`read`).

        A torn last line is cut off the file once the iteration reaches it.

        Raises:
            RecordError: As :meth:`read`.
        """
        if not self.path.exists():
            return
        good_end = 0
        torn = False
        with open(self.path, "rb") as f:
            for lineno, raw in enumerate(f, 1):
                if not raw.endswith(b"\n"):  # no trailing newline: the write of this line never finished
                    if raw.strip():
                        log.warning("%s: dropping torn last line %d (interrupted write)", self.path, lineno)
                        torn = True
                    else:
                        good_end += len(raw)
                    break
                good_end += len(raw)
                if not raw.strip():
                    continue
                try:
                    obj = json.loads(raw)
                except json.JSONDecodeError as err:
                    raise RecordError(f"{self.path} line {lineno}: invalid JSON ({err.msg})") from err
                yield from_dict(self.record_type, obj, where=f"{self.path} line {lineno}") if self.record_type else obj
        if torn:
            with open(self.path, "r+b") as f:
                f.truncate(good_end)

    def append(self, records: Iterable[Any]) -> int:
        """Append records (dataclasses or dicts), one line each, flushed to disk. Returns the count."""
        if self._fh is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fh = open(self.path, "a", encoding="utf-8")
        n = 0
        for rec in records:
            obj = rec if isinstance(rec, dict) else to_dict(rec)
            self._fh.write(json.dumps(obj, ensure_ascii=False, default=_json_default) + "\n")
            n += 1
        self._fh.flush()
        os.fsync(self._fh.fileno())
        return n

    def rewrite(self, records: Iterable[Any]) -> int:
        """Replace the shard's content with ``records`` (a temporary file, then a rename).

        For derived shards, recomputed in full, and for dropping a killed run's partial
        records. Returns the count written.
        """
        self.close()
        tmp = Shard(self.path.with_name(f".{self.path.name}.tmp"))
        tmp.path.unlink(missing_ok=True)
        with tmp:
            n = tmp.append(records)
        os.replace(tmp.path, self.path)
        return n

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def __enter__(self) -> Shard:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


_ADMIT_HOOKS: list[Callable[[Path], None]] = []


@contextmanager
def on_admit(hook: Callable[[Path], None]) -> Iterator[None]:
    """Call ``hook(run dir path)`` each time a :class:`RunDir` is admitted while the block runs
    (after its lock and sampling check, before anything in it changes). A hook that raises
    refuses the start (the manifest stays)."""
    _ADMIT_HOOKS.append(hook)
    try:
        yield
    finally:
        _ADMIT_HOOKS.remove(hook)


_GUARDS: list[list[RunDir]] = []


@contextmanager
def restore_on_failure(logs: Callable[[], Iterable[str]] = tuple) -> Iterator[list[RunDir]]:
    """Collect every :class:`RunDir` admitted while the block runs; if the block raises, put back
    each directory whose start changed nothing but bookkeeping (:mod:`mbs.run_restore`): a
    finished run's manifest and files stay as they were. Restores all or none (an outer run
    directory holding an inner one that changed is itself changed).

    Args:
        logs: Returns the job log files the start appended to (cut back when restored).

    Yields:
        The run directories admitted so far (each has ``restored`` set after a failure).
    """
    opened: list[RunDir] = []
    _GUARDS.append(opened)
    try:
        yield opened
    except BaseException:
        files = list(logs())
        if opened and all(run.restorable(files) for run in opened):
            for run in reversed(opened):
                run.restore_start(files)
        raise
    finally:
        _GUARDS.remove(opened)


class RunDir:
    """A stage's output folder.

    Opening one takes the directory's lock (held while this object lives), checks the sampling
    config when ``sampling`` is given (:meth:`check_sampling`), and only then, the run admitted,
    runs the :func:`on_admit` hooks and removes ``manifest.json``. A refused open changes no
    file of the directory (the lock file's holder line is put back); under
    :func:`restore_on_failure` (every ``mbs-*`` command), neither does a start that fails
    before writing anything of its own (:mod:`mbs.run_restore`).

    Args:
        path: The folder (created if missing).
        stage: Stage name written into the manifest.
        shard_index: This process's shard (files are named ``<name>.<index>-of-<count>.jsonl``).
        shard_count: Number of shards.
        sampling: The sampling config the records are drawn under, ``{dotted key: value}``
            (:func:`mbs.stages.config.sampling_config`): checked before the run is admitted
            (:meth:`check_sampling`; ``None``: not checked).
        allow_config_change: A run whose sampling config differs from the recorded one keeps
            the old records and draws the rest under the new values (``resume.allow_config_change``).

    Raises:
        RunDirError: Another process holds the directory (names its host and pid), or its
            records were drawn under another sampling config and ``allow_config_change`` is
            false (see :meth:`check_sampling`).
    """

    def __init__(
        self, path: str | os.PathLike, stage: str, shard_index: int = 0, shard_count: int = 1,
        sampling: dict[str, Any] | None = None, allow_config_change: bool = False,
    ):
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self.stage = stage
        self.shard_index = int(shard_index)
        self.shard_count = int(shard_count)
        self._lock = RunLock.acquire(self.path)
        self.restored = False
        self._snapshot: StartSnapshot | None = None
        try:
            if sampling is not None:
                self.check_sampling(sampling, allow_config_change)
            if _GUARDS:  # under restore_on_failure: what a failing start must put back
                self._snapshot = StartSnapshot(self.path)
            for hook in list(_ADMIT_HOOKS):
                hook(self.path)
        except BaseException:
            self._lock.restore()
            raise
        self._lock_before = self._lock.admitted()
        if _GUARDS:
            _GUARDS[-1].append(self)
        # the manifest marks a finished stage: a stage (re)starting here is not finished
        (self.path / MANIFEST).unlink(missing_ok=True)
        self.started = time.time()
        self.timings: dict[str, float] = {}

    def restorable(self, logs: Iterable[str] = ()) -> bool:
        """Whether this start changed nothing but bookkeeping, the job ``logs`` and new empty
        files (see :mod:`mbs.run_restore`; only under :func:`restore_on_failure`)."""
        return self._snapshot is not None and not self._snapshot.changed(logs)

    def restore_start(self, logs: Iterable[str] = ()) -> bool:
        """Put the directory back as it was before this start, lock holder line included, if
        :meth:`restorable`. Returns whether it did (then :attr:`restored` is true)."""
        if self._snapshot is None or not self._snapshot.restore(logs):
            return False
        if self._lock_before is not None:
            self._lock.put_back(self._lock_before)
        self.restored = True
        return True

    def shard(self, name: str, record_type: type | None = None) -> Shard:
        """The shard file of record set ``name`` for this process."""
        return Shard(self.path / f"{name}.{self.shard_index:05d}-of-{self.shard_count:05d}.jsonl", record_type)

    def write_config(self, config_yaml: str) -> None:
        """Save the config and the git revision: ``config.yaml`` (``config_yaml``, the text the
        stage renders: :func:`mbs.stages.config.config_yaml`) and ``git.json``."""
        write_text_atomic(self.path / "config.yaml", config_yaml)
        write_json_atomic(self.path / "git.json", git_revision())

    def check_sampling(self, now: dict[str, Any], allow_config_change: bool = False) -> None:
        """Write ``sampling.json`` while the directory holds no records; once it does, compare.

        Args:
            now: The sampling config, ``{dotted key: value}`` (empty: nothing is checked or written).
            allow_config_change: Keep the old records when the values differ (a warning, and
                ``sampling.json`` records both the new and the previous values).

        Raises:
            RunDirError: The directory's records were drawn under another sampling config and
                ``allow_config_change`` is false (names each key, old and new value).
        """
        if not now:
            return
        path = self.path / SAMPLING
        holds_records = any(p.stat().st_size > 0 for p in self.path.glob("*.jsonl"))
        if path.is_file() and holds_records:
            before = read_json(path).get("config", {})
            diff = _diff(before, now)
            if diff:
                listed = "; ".join(f"{k}: {_short(a)} -> {_short(b)}" for k, a, b in diff[:8])
                if not allow_config_change:
                    raise RunDirError(
                        f"{self.path} holds records drawn under another sampling config ({listed}); "
                        "rerun with the recorded values, use another hydra.run.dir, or set "
                        "resume.allow_config_change=true to keep the old records and draw the rest under the new values"
                    )
                log.warning("%s: sampling config changed (%s); resume.allow_config_change=true keeps the old records", self.path, listed)
                write_json_atomic(path, {"config": now, "previous": before})
            return
        write_json_atomic(path, {"config": now})

    def record_distribution(self, distribution: dict[str, Any]) -> None:
        """Add ``distribution`` to ``sampling.json``: per policy, the distribution its samples are
        drawn from, engine defaults included (derived from the sampling config, so never compared
        on resume; see :func:`mbs.training.provenance.sampled_distributions`)."""
        path = self.path / SAMPLING
        record = read_json(path) if path.is_file() else {}
        write_json_atomic(path, {**record, "distribution": distribution})

    def write_summary(self, summary: dict[str, Any]) -> Path:
        """Write ``summary.json`` (the stage's headline numbers)."""
        return write_json_atomic(
            self.path / SUMMARY, redact_obj({"schema_version": SCHEMA_VERSION, "stage": self.stage, **summary})
        )

    def write_manifest(self, counts: dict[str, Any], **extra: Any) -> Path:
        """Write ``manifest.json`` last: counts, timings, files and their sizes."""
        files = {
            str(p.relative_to(self.path)): p.stat().st_size
            for p in sorted(self.path.rglob("*"))
            if p.is_file() and p.name != MANIFEST and not p.name.startswith(".")
        }
        return write_json_atomic(
            self.path / MANIFEST,
            redact_obj({
                "schema_version": SCHEMA_VERSION,
                "stage": self.stage,
                "shard": {"index": self.shard_index, "count": self.shard_count},
                "started": self.started,
                "finished": time.time(),
                "seconds": round(time.time() - self.started, 3),
                "timings_s": {k: round(v, 3) for k, v in self.timings.items()},
                "counts": counts,
                "git": git_revision(),
                "files": files,
                **extra,
            }),
        )


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    """Write text via a temporary file and rename (never torn)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _diff(before: dict[str, Any], now: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    missing = object()
    keys = sorted(set(before) | set(now))
    out = []
    for k in keys:
        a, b = before.get(k, missing), now.get(k, missing)
        if a is missing or b is missing:  # a key this stage or code version does not have
            continue
        if a != b and not (isinstance(a, (int, float)) and isinstance(b, (int, float)) and float(a) == float(b)):
            out.append((k, a, b))
    return out


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


# --------------------------------------------------------------------------------------
# Public readers (used by analysis/ and mbs-figures)
# --------------------------------------------------------------------------------------


def read_json(path: str | os.PathLike) -> dict[str, Any]:
    """Read a JSON file.

    Raises:
        FileNotFoundError: The file is missing (the message names it).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found")
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def read_summary(run_dir: str | os.PathLike) -> dict[str, Any]:
    """``summary.json`` of a run directory."""
    return read_json(Path(run_dir) / SUMMARY)


def read_manifest(run_dir: str | os.PathLike) -> dict[str, Any]:
    """``manifest.json`` of a run directory (present only when the stage finished)."""
    return read_json(Path(run_dir) / MANIFEST)


def shard_files(run_dir: str | os.PathLike, name: str) -> list[Path]:
    """All shard files of record set ``name`` in a run directory, in shard order."""
    return sorted(Path(run_dir).glob(f"{name}.*-of-*.jsonl"))


def read_records(run_dir: str | os.PathLike, name: str, record_type: type | None = None) -> list[Any]:
    """Every record of set ``name`` across all shards of a run directory."""
    out: list[Any] = []
    for path in shard_files(run_dir, name):
        out.extend(Shard(path, record_type).read())
    return out


def iter_jsonl(path: str | os.PathLike) -> Iterator[tuple[int, Any]]:
    """Yield ``(line number, parsed object)`` of a JSONL file, skipping blank lines (a UTF-8
    byte-order mark is accepted).

    Raises:
        RecordError: Invalid JSON or a line that is not UTF-8 text (names file and line).
    """
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
            except UnicodeDecodeError as err:
                raise RecordError(f"{path} line {lineno}: not UTF-8 text (byte 0x{raw[err.start]:02x} at column {err.start + 1})") from None
            if not line.strip():
                continue
            try:
                yield lineno, json.loads(line)
            except json.JSONDecodeError as err:
                raise RecordError(f"{path} line {lineno}: invalid JSON ({err.msg})") from err
