"""Graded rollouts and calibrations grouped on disk, so a stage's memory does not grow with them.

The paper's calibration (78K problems, N = 8, three budgets L, two policies: about 3.7 million
rollouts, each up to 32K tokens) cannot be held in memory by the process that finalises it.
:class:`RolloutIndex` keeps one compact row per graded rollout (no text) and :class:`BandTable`
one row per calibration, each in an anonymous SQLite database (Python's :mod:`sqlite3`): it
lives in a small page cache and spills to a temporary file (in ``TMPDIR``, removed on close),
so memory stays bounded whatever the number of records, and sorting and joining are SQLite's
(external merge sort, B-tree lookups), linear-logarithmic in time.

Measured by ``tests/benchmarks/bench_stage_scale.py`` (issue 22).
"""

from __future__ import annotations

import itertools
import math
import sqlite3
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple, Self

from mbs.calibration.estimate import pass_rate_of
from mbs.records import BANDS, is_complete_correct, rollout_key
from mbs.stats import share

#: Rows per ``executemany`` (bounds the rows held while inserting).
CHUNK = 10_000
#: Budget stored for recorded policies (``budget=None``): sorts before every budget L >= 1.
RECORDED = -1


def budget_key(budget: int | None) -> str:
    """Summary key of a budget: the token count as a string, or ``recorded``."""
    return "recorded" if budget is None else str(int(budget))


def budget_sort_key(key: str) -> tuple[int, int]:
    """Sort key of a budget key: numeric budgets L in order (``"64"`` before ``"128"``), then
    ``"recorded"``."""
    return (1, 0) if key == "recorded" else (0, int(key))


def _connect() -> sqlite3.Connection:
    db = sqlite3.connect("")  # "": a private on-disk temporary database, deleted on close
    db.execute("PRAGMA journal_mode=OFF")
    db.execute("PRAGMA synchronous=OFF")
    db.execute("PRAGMA cache_size=-16384")  # KiB: at most 16 MiB of pages in memory
    return db


class _OnDisk:
    """A table in its own anonymous SQLite database (:func:`_connect`); a context manager."""

    def __init__(self, schema: str) -> None:
        self._db = _connect()
        self._db.execute(schema)

    def _insert(self, sql: str, rows: Iterable[tuple]) -> int:
        """Run ``sql`` (an ``INSERT``) over ``rows``, :data:`CHUNK` rows per ``executemany``
        (bounded memory: the rows are streamed).

        Returns:
            The number of rows read from ``rows``.
        """
        n = 0
        it = iter(rows)
        while chunk := list(itertools.islice(it, CHUNK)):
            self._db.executemany(sql, chunk)
            n += len(chunk)
        return n

    def close(self) -> None:
        """Drop the database (its temporary file goes with it)."""
        self._db.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Outcome(NamedTuple):
    """A graded rollout without its text: what calibration needs of it.

    Accepted wherever :func:`mbs.calibration.calibrate_group` and :func:`mbs.calibration.settled`
    take a :class:`~mbs.records.Rollout` (same attribute names).
    """

    problem_id: str
    policy: str
    budget: int | None
    sample_index: int
    reward: float | None
    finish_reason: str | None
    completion_tokens: int
    reason: str | None

    @property
    def key(self) -> tuple:
        """(problem, policy, budget, sample), as :attr:`mbs.records.Rollout.key`."""
        return rollout_key(self)

    @property
    def complete_correct(self) -> bool:
        """Correct and complete within L (finish reason ``stop``), as the rollout's."""
        return is_complete_correct(self)


class Mark(NamedTuple):
    """What :class:`GroupOutcomes` keeps of a finished rollout: what
    :func:`mbs.calibration.settled` reads (``reward`` 1.0 if correct, else 0.0)."""

    reward: float
    complete_correct: bool


class GroupOutcomes:
    """The finished rollouts of a calibration as three bit masks per (problem, policy, budget L)
    group: which samples are done, correct, and correct and complete. A mapping from
    :attr:`~mbs.records.Rollout.key` to :class:`Mark`, as much of one as
    :class:`mbs.calibration.sampling.RolloutWriter` and :func:`mbs.calibration.sampling.draw` use (``in``, ``[]``,
    ``[] =``, ``len``): memory grows with the groups (~0.3 KiB each), not with the rollouts.
    """

    def __init__(self, rollouts: Iterable[Any] = ()) -> None:
        self._groups: dict[tuple, list[int]] = {}
        self._n = 0
        for r in rollouts:
            self[r.key] = r

    def __setitem__(self, key: tuple, rollout: Any) -> None:
        masks = self._groups.setdefault(key[:3], [0, 0, 0])
        bit = 1 << int(key[3])
        self._n += not masks[0] & bit
        masks[0] |= bit
        for slot, on in ((1, rollout.reward == 1.0), (2, rollout.complete_correct)):
            masks[slot] = masks[slot] | bit if on else masks[slot] & ~bit

    def __contains__(self, key: object) -> bool:
        if not (isinstance(key, tuple) and len(key) == 4):
            return False
        masks = self._groups.get(key[:3])
        return masks is not None and bool(masks[0] >> int(key[3]) & 1)

    def __getitem__(self, key: tuple) -> Mark:
        if key not in self:
            raise KeyError(key)
        masks, i = self._groups[key[:3]], int(key[3])
        return Mark(1.0 if masks[1] >> i & 1 else 0.0, bool(masks[2] >> i & 1))

    def __len__(self) -> int:
        return self._n


class RolloutIndex(_OnDisk):
    """Graded rollouts of a run, grouped per (problem, policy, budget L), in bounded memory.

    A rollout added twice (same :attr:`~mbs.records.Rollout.key`) is kept once, the last one
    added winning (as a dict keyed by it would). Use as a context manager, or :meth:`close`.
    """

    def __init__(self) -> None:
        super().__init__(
            "CREATE TABLE r (policy TEXT NOT NULL, budget INTEGER NOT NULL, problem_id TEXT NOT NULL, "
            "sample_index INTEGER NOT NULL, reward REAL, finish_reason TEXT, completion_tokens INTEGER NOT NULL, "
            "reason TEXT, PRIMARY KEY (policy, budget, problem_id, sample_index)) WITHOUT ROWID"
        )

    def add(self, rollouts: Iterable[Any]) -> int:
        """Add graded rollouts (:class:`~mbs.records.Rollout` or :class:`Outcome`), streamed.

        Returns:
            The number of rollouts read from ``rollouts`` (duplicates included).
        """
        return self._insert(
            "INSERT OR REPLACE INTO r VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            ((r.policy, RECORDED if r.budget is None else int(r.budget), r.problem_id, int(r.sample_index),
              r.reward, r.finish_reason, int(r.completion_tokens), r.reason) for r in rollouts),
        )

    def __len__(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM r").fetchone()[0])

    def groups(self) -> Iterator[list[Outcome]]:
        """The rollouts of each group, groups ordered by (policy, budget (recorded first), problem
        id) and each group's rollouts by sample index; one group in memory at a time."""
        rows = self._db.execute("SELECT problem_id, policy, budget, sample_index, reward, finish_reason, "
                                "completion_tokens, reason FROM r ORDER BY policy, budget, problem_id, sample_index")
        for _, grp in itertools.groupby(rows, key=lambda row: (row[1], row[2], row[0])):
            yield [Outcome(pid, pol, None if b == RECORDED else b, i, rew, fin, tok, why)
                   for pid, pol, b, i, rew, fin, tok, why in grp]

    def graded(self) -> Iterator[tuple[str | None, float | None]]:
        """``(reason, reward)`` per rollout (for :func:`mbs.verify.rules.extraction_report`)."""
        yield from self._db.execute("SELECT reason, reward FROM r")

    def totals(self) -> dict[str, int]:
        """``drawn``, ``ungraded`` (reward ``None``), ``completion_tokens`` and ``truncated``
        (finish reason ``length``) over every rollout."""
        drawn, ungraded, tokens, truncated = self._db.execute(
            "SELECT COUNT(*), COALESCE(SUM(reward IS NULL), 0), COALESCE(SUM(completion_tokens), 0), "
            "COALESCE(SUM(finish_reason = 'length'), 0) FROM r"
        ).fetchone()
        return {"drawn": drawn, "ungraded": ungraded, "completion_tokens": tokens, "truncated": truncated}


class SeenKeys(_OnDisk):
    """A set of record identities, each with the number of the input it came from, on disk
    (bounded memory; for the duplicate check of :func:`mbs.shards.union_records`)."""

    def __init__(self) -> None:
        super().__init__("CREATE TABLE k (key TEXT PRIMARY KEY, source INTEGER NOT NULL) WITHOUT ROWID")
        self._n = 0

    def add(self, key: str, source: int) -> int | None:
        """Record ``key`` from ``source``; returns the source it was seen in before, or ``None``."""
        try:
            self._db.execute("INSERT INTO k VALUES (?, ?)", (key, source))
        except sqlite3.IntegrityError:
            return int(self._db.execute("SELECT source FROM k WHERE key=?", (key,)).fetchone()[0])
        self._n += 1
        return None

    def __len__(self) -> int:
        return self._n


class BandTable(_OnDisk):
    """Calibrations reduced to the trap statistics (:func:`mbs.calibration.trap_summary`), in
    bounded memory: one row per (policy, budget key, problem) holding band, usability, pass
    rate (the unbiased estimate of :func:`mbs.calibration.estimate.pass_rate_of`, NULL where an
    old record has none), rollouts and truncations. A calibration added twice for the same key
    replaces the first. Use as a context manager, or :meth:`close`.
    """

    def __init__(self) -> None:
        super().__init__(
            "CREATE TABLE c (policy TEXT NOT NULL, bkey TEXT NOT NULL, problem_id TEXT NOT NULL, band TEXT NOT NULL, "
            "usable INTEGER NOT NULL, pass_rate REAL, n INTEGER NOT NULL, truncated INTEGER NOT NULL, "
            "early INTEGER NOT NULL, PRIMARY KEY (policy, bkey, problem_id)) WITHOUT ROWID"
        )

    def add(self, calibrations: Iterable[Any]) -> None:
        """Add :class:`~mbs.records.Calibration` records (streamed)."""
        self._insert(
            "INSERT OR REPLACE INTO c VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            ((c.policy, budget_key(c.budget), c.problem_id, c.band, int(bool(c.usable)), pass_rate_of(c), int(c.n),
              int(c.truncated), int(bool(c.early_stopped))) for c in calibrations),
        )

    def summary(self) -> dict[str, Any]:
        """The dictionary :func:`mbs.calibration.trap_summary` returns (see there)."""
        db = self._db
        cells: dict[str, list[str]] = {}
        for policy, bkey in db.execute("SELECT DISTINCT policy, bkey FROM c ORDER BY policy"):
            cells.setdefault(policy, []).append(bkey)
        bands: dict[str, dict[str, dict[str, float]]] = {}
        counts: dict[str, dict[str, dict[str, Any]]] = {}
        intervals: dict[str, dict[str, dict[str, Any]]] = {}
        for policy in sorted(cells):
            cells[policy].sort(key=budget_sort_key)
            bands[policy], counts[policy], intervals[policy] = {}, {}, {}
            for bkey in cells[policy]:
                where = (policy, bkey)
                cnt = {b: 0 for b in BANDS}
                for band, k in db.execute("SELECT band, COUNT(*) FROM c WHERE policy=? AND bkey=? GROUP BY band", where):
                    cnt[band] = k
                n, usable, rollouts, truncated = db.execute(
                    "SELECT COUNT(*), SUM(usable), SUM(n), SUM(truncated) FROM c WHERE policy=? AND bkey=?", where
                ).fetchone()
                # the unbiased estimate under early stopping (s/k of stopped groups and s/N of full ones are
                # biased); old records of stopped groups have none and are left out
                rated = [r for (r,) in db.execute("SELECT pass_rate FROM c WHERE policy=? AND bkey=? AND pass_rate IS NOT NULL", where)]
                bands[policy][bkey] = {b: cnt[b] / n for b in BANDS}
                intervals[policy][bkey] = {
                    **{b: share(cnt[b], n) for b in BANDS},
                    "trapped": share(cnt["solved_all"] + cnt["failed_all"], n),
                    "usable": share(int(usable), n),
                }
                counts[policy][bkey] = {
                    **cnt,
                    "n_problems": n,
                    "usable": usable,
                    "trapped": (cnt["solved_all"] + cnt["failed_all"]) / n,
                    "pass_rate_mean": math.fsum(rated) / len(rated) if rated else None,
                    "pass_rate_groups": len(rated),
                    "rollouts": rollouts,
                    "truncated": truncated,
                }
        recl: dict[str, dict[str, dict[str, float]]] = {"policies": {}, "budgets": {}}
        recl_ci: dict[str, dict[str, dict[str, Any]]] = {"policies": {}, "budgets": {}}

        def reclassified(axis: str, group: str, pair: str, a: tuple[str, str], b: tuple[str, str]) -> None:
            moved, common = self._reclassified(a, b)
            if common:
                recl[axis].setdefault(group, {})[pair] = moved / common
                recl_ci[axis].setdefault(group, {})[pair] = share(moved, common)

        for bkey in sorted({b for bs in cells.values() for b in bs}, key=budget_sort_key):
            pols = [p for p in sorted(cells) if bkey in cells[p]]
            for a, b in itertools.combinations(pols, 2):
                reclassified("policies", bkey, f"{a}|{b}", (a, bkey), (b, bkey))
        for policy in sorted(cells):
            for x, y in itertools.combinations(cells[policy], 2):
                reclassified("budgets", policy, f"{x}|{y}", (policy, x), (policy, y))
        return {
            "bands": bands,
            "counts": counts,
            "reclassification": recl,
            "intervals": {"bands": intervals, "reclassification": recl_ci},
        }

    def _reclassified(self, a: tuple[str, str], b: tuple[str, str]) -> tuple[int, int]:
        """``(moved, common)``: problems calibrated in both cells, and how many of them changed band."""
        common, moved = self._db.execute(
            "SELECT COUNT(*), COALESCE(SUM(x.band != y.band), 0) FROM c x JOIN c y ON y.policy=? AND y.bkey=? "
            "AND y.problem_id = x.problem_id WHERE x.policy=? AND x.bkey=?", (*b, *a)
        ).fetchone()
        return int(moved), int(common)
