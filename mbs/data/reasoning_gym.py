"""Procedural problems of controllable difficulty from Reasoning Gym (PyPI ``reasoning-gym``).

Run: ``mbs-calibrate data=reasoning_gym 'data.tasks=[chain_sum]' data.size=20 calibrate.n=8
'calibrate.budgets=[32,128]' hydra.run.dir=DIR``.

Reasoning Gym is read as a data source: each named generator (``data.tasks``) is built with
:func:`reasoning_gym.create_dataset` at every level of its difficulty axis (``data.levels``:
level name -> generator parameters, on top of ``data.params``), with the seed ``data.seed``.
A task without levels has one level, ``default``. ``data.size`` problems per task are spread
over its levels (problem ``i`` of a level is the generator's item ``i``: with the same seed, the
same index draws the same random stream at every level, so levels are paired problems).

Each :class:`~mbs.records.Problem` keeps:

* ``id`` = ``reasoning_gym/<task>/<level>-<h>/<index>`` where ``<h>`` hashes the level's
  parameters and the seed: the same config gives the same ids in every run and process, and
  a level whose parameters change gets new ids (a resumed run never reuses rollouts of other
  problems);
* ``answer_type`` = ``reasoning_gym`` (the verifier :mod:`mbs.verify.reasoning_gym` grades it
  with the generator's own ``score_answer``), ``data_source`` = ``mbs/reasoning_gym/<task>``;
* ``ground_truth`` = the JSON text of what ``score_answer`` needs:
  ``{"task": ..., "answer": ..., "metadata": {...}}`` (:func:`gold_json`), so calibration, MBS
  trace checks and verl's ``compute_score`` grade from the ground truth alone; a task named in
  ``data.strict_tasks`` adds ``"answer_format": "answer tag"``: its answers count only in the
  answer tag, never by the boxed or last-number fallback (and its ids hash that, too);
* ``metadata``: ``difficulty`` (``<task>/<level>``, the key summaries and figures group by),
  ``difficulty_rank`` (the level's position on the task's axis), ``task``, ``level``,
  ``params`` (the generator parameters), ``answer`` (the plain oracle answer) and
  ``rg_metadata`` (the generator's metadata of the item).

Bad config (an unknown generator, an unknown parameter, an impossible level) raises
:class:`~mbs.data.DataError` naming the key and listing the valid values, before any rollout.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from mbs.data.base import DataError, LoadReport, register_loader
from mbs.records import Problem
from mbs.verify.reasoning_gym import ANSWER_TAG
from mbs.verify.sources import data_source

ANSWER_TYPE = "reasoning_gym"
#: Config fields every Reasoning Gym generator has; mbs sets them from data.seed / data.size.
_RESERVED = ("seed", "size")


@dataclasses.dataclass(frozen=True)
class Level:
    """One level of a task's difficulty axis.

    Attributes:
        task: Reasoning Gym generator name (e.g. ``chain_sum``).
        name: Level name (``default`` for a task without levels).
        rank: Position of the level on the task's axis (0 = first listed).
        params: Generator config fields (``data.params.<task>`` updated by the level's own).
        count: Problems drawn at this level.
        strict: Answers count only in the answer tag (``data.strict_tasks``): the ground truth
            carries ``answer_format: "answer tag"`` and the level's ids differ from the lenient ones.
    """

    task: str
    name: str
    rank: int
    params: dict[str, Any]
    count: int
    strict: bool = False

    @property
    def label(self) -> str:
        """The difficulty label recorded on each problem: ``<task>/<level>``."""
        return f"{self.task}/{self.name}"


def _registry() -> dict[str, tuple[type, type]]:
    try:
        # lazy: heavy import (every generator), only data=reasoning_gym needs it
        from reasoning_gym.factory import DATASETS
    except ImportError as err:  # pragma: no cover - a dependency of mbs
        raise DataError("data.loader=reasoning_gym needs the package reasoning-gym (pip install reasoning-gym)") from err
    return DATASETS


def _plain(node: Any) -> Any:
    return OmegaConf.to_container(node, resolve=True) if isinstance(node, (DictConfig, ListConfig)) else node


def task_names(data_cfg: Any) -> list[str]:
    """The generator names of ``data.tasks`` (a list of names), checked against Reasoning Gym.

    Raises:
        DataError: ``data.tasks`` is empty, not a list of names, repeats a name, or names a
            generator Reasoning Gym does not have (the message lists the valid names).
    """
    tasks = _plain(data_cfg.get("tasks"))
    if isinstance(tasks, str):
        tasks = [tasks]
    if not isinstance(tasks, list) or not tasks or not all(isinstance(t, str) and t for t in tasks):
        raise DataError(f"data.tasks={tasks!r}: give a non-empty list of Reasoning Gym generator names, e.g. [chain_sum]")
    registry = _registry()
    for i, t in enumerate(tasks):
        if t not in registry:
            raise DataError(f"data.tasks[{i}]={t!r} is not a Reasoning Gym generator; valid: {sorted(registry)}")
    dup = sorted({t for t in tasks if tasks.count(t) > 1})
    if dup:
        raise DataError(f"data.tasks lists {dup} more than once")
    return list(tasks)


def _params_of(task: str, params: Any, key: str) -> dict[str, Any]:
    """Check one parameter mapping against the generator's config dataclass."""
    if params is None:
        return {}
    if not isinstance(params, dict):
        raise DataError(f"{key}={params!r}: expected a mapping of {task} parameters")
    config_cls = _registry()[task][1]
    valid = [f.name for f in dataclasses.fields(config_cls) if f.name not in _RESERVED]
    for name in params:
        if name in _RESERVED:
            raise DataError(f"{key}.{name}: set by data.{name}, not per task")
        if name not in valid:
            raise DataError(f"{key}.{name}: {task} has no parameter {name!r}; valid: {valid}")
    return dict(params)


def levels_of(data_cfg: Any) -> list[Level]:
    """The (task, level) grid of a ``data=reasoning_gym`` config, validated.

    Every level's generator is built once with its parameters and the generator's own
    ``validate()`` runs, so an impossible level (``min_digits > max_digits``, ...) fails here.

    Returns:
        The levels in config order (tasks as listed, levels as listed per task).

    Raises:
        DataError: Unknown generator (lists the valid names), unknown parameter (lists the
            generator's parameters), a level the generator rejects (names
            ``data.levels.<task>.<level>`` and the generator's reason), ``data.levels`` or
            ``data.params`` naming a task not in ``data.tasks``, or a bad ``data.size``.
    """
    tasks = task_names(data_cfg)
    size = data_cfg.get("size")
    if not isinstance(size, int) or isinstance(size, bool) or size < 1:
        raise DataError(f"data.size={size!r}: expected a positive number of problems per task")
    params = _plain(data_cfg.get("params")) or {}
    levels = _plain(data_cfg.get("levels")) or {}
    registry = _registry()
    for key, mapping in (("data.params", params), ("data.levels", levels)):
        if not isinstance(mapping, dict):
            raise DataError(f"{key}: expected a mapping task -> ..., got {mapping!r}")
        for t in mapping:
            if t not in registry:
                raise DataError(f"{key}.{t}: {t!r} is not a Reasoning Gym generator; valid: {sorted(registry)}")
    strict = _plain(data_cfg.get("strict_tasks")) or []
    if not isinstance(strict, list) or any(t not in registry for t in strict):
        raise DataError(f"data.strict_tasks={strict!r}: expected a list of Reasoning Gym generators; valid: {sorted(registry)}")
    out: list[Level] = []
    for task in tasks:
        base = _params_of(task, params.get(task), f"data.params.{task}")
        # levels of tasks not in data.tasks are allowed (a config may define axes for several tasks)
        task_levels = levels.get(task) or {"default": {}}
        if not isinstance(task_levels, dict):
            raise DataError(f"data.levels.{task}: expected a mapping level name -> parameters, got {task_levels!r}")
        names = list(task_levels)
        for rank, name in enumerate(names):
            key = f"data.levels.{task}.{name}"
            if not isinstance(name, str) or not name or "/" in name:
                raise DataError(f"{key}: a level name must be a non-empty string without '/'")
            merged = {**base, **_params_of(task, task_levels[name], key)}
            count = size // len(names) + (1 if rank < size % len(names) else 0)
            if count:
                _check_level(task, merged, key)
                out.append(Level(task, name, rank, merged, count, strict=task in strict))
    return out


def _check_level(task: str, params: dict[str, Any], key: str) -> None:
    config_cls = _registry()[task][1]
    try:
        config = config_cls(**params, seed=0, size=1)
        if hasattr(config, "validate"):
            config.validate()
    except (AssertionError, ValueError, TypeError) as err:
        raise DataError(f"{key}: {task} rejects parameters {params}: {err or type(err).__name__}") from None


def _level_hash(level: Level, seed: int) -> str:
    # a strict level hashes its answer format too (its rollouts are graded differently); a lenient
    # level keeps the ids it always had
    key = {"task": level.task, "params": level.params, "seed": seed, **({"answer_format": ANSWER_TAG} if level.strict else {})}
    text = json.dumps(key, sort_keys=True, default=str)
    return hashlib.blake2b(text.encode("utf-8"), digest_size=3).hexdigest()


def gold_json(task: str, answer: str, metadata: dict[str, Any], strict: bool = False) -> str:
    """The ground truth of a Reasoning Gym problem: what the generator's ``score_answer`` reads.

    Args:
        strict: The answer counts only in the answer tag (adds ``"answer_format": "answer tag"``,
            which :func:`mbs.verify.reasoning_gym.grade_reasoning_gym` enforces).

    Returns:
        Compact JSON text ``{"answer": ..., "metadata": ..., "task": ...}`` (keys sorted).
    """
    gold = {"task": task, "answer": answer, "metadata": metadata, **({"answer_format": ANSWER_TAG} if strict else {})}
    return json.dumps(gold, sort_keys=True, ensure_ascii=False, default=str)


def generate(data_cfg: Any) -> list[Problem]:
    """Every problem of a ``data=reasoning_gym`` config, in (task, level, index) order.

    Raises:
        DataError: A bad config (see :func:`levels_of`) or a generator that fails on an item
            (names the task, level and index).
    """
    import reasoning_gym  # lazy: heavy import (every generator), only data=reasoning_gym needs it

    seed = data_cfg.get("seed")
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise DataError(f"data.seed={seed!r}: expected a non-negative integer")
    problems: list[Problem] = []
    for level in levels_of(data_cfg):
        ds = reasoning_gym.create_dataset(level.task, seed=seed, size=level.count, **level.params)
        h = _level_hash(level, seed)
        for i in range(level.count):
            try:
                entry = ds[i]
            except Exception as err:  # noqa: BLE001 - a generator bug is a data error here
                raise DataError(f"data.levels.{level.task}.{level.name}: generator failed on item {i}: {err!r}") from None
            answer = str(entry["answer"])
            meta = json.loads(json.dumps(entry.get("metadata") or {}, default=str))
            problems.append(
                Problem(
                    id=f"reasoning_gym/{level.task}/{level.name}-{h}/{i}",
                    data_source=data_source(ANSWER_TYPE, level.task),
                    prompt=str(entry["question"]),
                    ground_truth=gold_json(level.task, answer, meta, strict=level.strict),
                    answer_type=ANSWER_TYPE,
                    metadata={
                        "difficulty": level.label,
                        "difficulty_rank": level.rank,
                        "task": level.task,
                        "level": level.name,
                        "params": level.params,
                        "answer": answer,
                        "rg_metadata": meta,
                    },
                )
            )
    return problems


@register_loader("reasoning_gym")
def _load_reasoning_gym(data_cfg: Any, report: LoadReport) -> list[Problem]:
    return generate(data_cfg)
