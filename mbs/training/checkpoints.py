"""Training checkpoints that a kill never leaves half-written as the latest, and logs that a
resume continues without a duplicated or missing step.

A checkpoint folder ``checkpoints/checkpoint-<step>/`` is *complete* once its sentinel
:data:`COMPLETE` is there: written last (a temporary file, then a rename), after the trainer has
written every file of the checkpoint (weights, optimizer, scheduler, RNG states, trainer state),
and listing each file with its size. A folder without it, or whose files no longer have the
listed sizes, was cut short (killed or out of disk while saving) and is never resumed from
(:func:`last_checkpoint`); a resume removes the incomplete ones after its starting point
(:func:`remove_incomplete_after`), since it writes those steps again. Old checkpoints are deleted
only after the new one is complete (:func:`rotate`), so a kill at any point leaves at least one
complete checkpoint once one was written.

The logs ``metrics.jsonl`` and ``completions.jsonl`` (one JSON object a line, each with its
``step``) are cut back to the resumed step by :func:`drop_after` (a torn last line included), so
a resumed run appends the later steps exactly once.

Safe against the process dying (``kill -9``, out of memory): files a dead process wrote stay in
the page cache. A power cut between the trainer's writes and the sentinel could leave listed
files unwritten on disk (nothing is fsynced but the sentinel).
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
from pathlib import Path

from mbs.io import write_json_atomic, write_text_atomic

__all__ = [
    "COMPLETE", "TRAINING_STATE", "checkpoint_step", "copy_model", "drop_after", "is_complete", "last_checkpoint", "mark_complete",
    "remove_incomplete_after", "replace_dir", "resume_hint", "rotate",
]

log = logging.getLogger(__name__)

#: The sentinel file of a complete checkpoint (written last): ``{"step": int, "files": {relative path: bytes}}``.
COMPLETE = "mbs_complete.json"

_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")


def checkpoint_step(path: str | os.PathLike) -> int | None:
    """The step of a ``checkpoint-<step>`` folder name (``None``: not a checkpoint folder)."""
    m = _CHECKPOINT.match(Path(path).name)
    return int(m.group(1)) if m else None


def _checkpoints(folder: Path) -> list[tuple[int, Path]]:
    """``(step, folder)`` of every ``checkpoint-<step>`` folder, newest first."""
    if not folder.is_dir():
        return []
    found = [(checkpoint_step(p), p) for p in folder.iterdir() if p.is_dir()]
    return sorted(((s, p) for s, p in found if s is not None), reverse=True)


def mark_complete(path: str | os.PathLike, step: int) -> Path:
    """Write the sentinel of checkpoint folder ``path`` (call it after every file is written).

    Returns:
        The sentinel file.
    """
    path = Path(path)
    files = {str(p.relative_to(path)): p.stat().st_size for p in sorted(path.rglob("*")) if p.is_file() and p.name != COMPLETE}
    out = write_json_atomic(path / COMPLETE, {"step": int(step), "files": files})
    fd = os.open(out, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return out


def is_complete(path: str | os.PathLike) -> bool:
    """Whether ``path`` holds a sentinel whose listed files are all there with their sizes."""
    path = Path(path)
    try:
        listed = json.loads((path / COMPLETE).read_text(encoding="utf-8"))["files"]
        return bool(listed) and all((path / name).stat().st_size == size for name, size in listed.items())
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False


def last_checkpoint(folder: str | os.PathLike) -> Path | None:
    """The newest complete ``checkpoint-<step>`` in ``folder`` (:func:`is_complete`), or ``None``.

    Incomplete ones newer than it are logged as skipped (killed or out of disk while saving).
    """
    for _, path in _checkpoints(Path(folder)):
        if is_complete(path):
            return path
        log.warning("%s is incomplete (no %s: the save was cut short): skipped", path, COMPLETE)
    return None


def resume_hint(folder: str | os.PathLike) -> str:
    """The end of a training error message: the last complete checkpoint in ``folder``, or that there is none."""
    last = last_checkpoint(folder)
    return f"the last complete checkpoint is {last} (a rerun resumes from it)" if last else "no checkpoint is complete yet"


def remove_incomplete_after(folder: str | os.PathLike, step: int) -> list[str]:
    """Delete the checkpoint folders after ``step`` (incomplete, or of steps a resume redoes).

    Returns:
        The folders removed (their paths, oldest first).
    """
    removed = []
    for s, path in sorted(_checkpoints(Path(folder))):
        if s > step:
            shutil.rmtree(path, ignore_errors=True)
            removed.append(str(path))
    return removed


def rotate(folder: str | os.PathLike, keep: int | None) -> list[str]:
    """Delete all but the newest ``keep`` complete checkpoints (``None``: keep all); never an
    incomplete one, and never before a newer checkpoint is complete.

    Returns:
        The folders removed.
    """
    if keep is None:
        return []
    complete = [p for _, p in _checkpoints(Path(folder)) if is_complete(p)]
    removed = []
    for path in complete[max(int(keep), 1):]:
        shutil.rmtree(path, ignore_errors=True)
        removed.append(str(path))
    return removed


def drop_after(path: str | os.PathLike, step: int) -> int:
    """Keep the lines of a JSONL log whose ``step`` is at most ``step``; drop later ones and a
    torn or unreadable line (replaced through a temporary file: a kill leaves the old or the new).

    Returns:
        The number of lines dropped.
    """
    path = Path(path)
    if not path.is_file():
        return 0
    keep, dropped = [], 0
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            if int(json.loads(line)["step"]) <= step:
                keep.append(line + "\n")
                continue
        except (ValueError, KeyError, TypeError):
            pass
        dropped += 1
    if dropped:
        write_text_atomic(path, "".join(keep))
    return dropped


def replace_dir(tmp: str | os.PathLike, final: str | os.PathLike) -> Path:
    """Put the folder ``tmp`` in the place of ``final`` (renames: ``final`` is never half-written;
    a kill between the two renames leaves the new folder at ``tmp`` and the old one gone)."""
    tmp, final = Path(tmp), Path(final)
    old = final.with_name(f".{final.name}.old")
    shutil.rmtree(old, ignore_errors=True)
    if final.exists():
        os.replace(final, old)
    os.replace(tmp, final)
    shutil.rmtree(old, ignore_errors=True)
    return final


#: Files of a checkpoint that restore training, not the model: what :func:`copy_model` leaves out.
TRAINING_STATE = re.compile(r"^(optimizer\.pt|scheduler\.pt|scaler\.pt|rng_state(_\d+)?\.pth|trainer_state\.json|"
                            r"training_args\.bin|" + re.escape(COMPLETE) + r")$")


def copy_model(checkpoint: str | os.PathLike, target: str | os.PathLike) -> Path:
    """The model of a complete checkpoint (weights, config, tokenizer: what the trainer's
    ``save_model`` wrote into it) copied into the folder ``target`` (created; replaced whole by
    :func:`replace_dir`), leaving out the training state (:data:`TRAINING_STATE`).

    Raises:
        OSError: A file cannot be read or written.
    """
    checkpoint, target = Path(checkpoint), Path(target)
    tmp = target.with_name(f".{target.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for path in sorted(checkpoint.iterdir()):
        if path.is_file() and not TRAINING_STATE.match(path.name):
            shutil.copy2(path, tmp / path.name)
    return replace_dir(tmp, target)
