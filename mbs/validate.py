"""Range and type checks of every numeric and enumerated config value, at stage entry.

Each stage's ``run(cfg)`` calls :func:`validate_config` first; a bad value raises
:class:`ConfigError` whose message names the key, the value given and the valid range, and the
command line ends with that message and exit status 2 (``mbs/cli.py``), before any work or
any file is written. The checks are one table (:data:`RULES`): a key pattern (``*`` matches
any mapping key or list index) and a check. Keys a stage's config does not have are skipped,
so one table serves every stage.

Every bad value is reported at once (one :class:`ConfigError` naming each), and every backend
node (``backend``, each student's, teacher's, judge's and evaluated model's) may hold only the
arguments of the class its ``_target_`` names (plus ``label``): an unknown key such as
``api_key`` is refused before anything is written, and the message never shows its value.

Beyond single values, :func:`validate_config` checks what spans keys: ``shard.index`` is in
``[0, shard.count)``, and a budget L (``calibrate.budgets``, a student's ``budget``, a
teacher's ``max_tokens``, ``eval.budgets``) fits the context window of the backend that
draws it where the window is known (``backend.n_ctx`` of llama.cpp, ``max_model_len`` of
vLLM). llama.cpp reads ``max_tokens <= 0`` as "until the context is full", so a budget that
is not positive would generate without bound.
"""

from __future__ import annotations

import importlib
import inspect
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from mbs import errors
from mbs.llm import NON_ARGS

#: Marks a key that is absent from the config (the check is skipped).
_ABSENT = object()


class ConfigError(errors.ConfigError):
    """Config values of the wrong type or out of range; the message names each key and its
    valid range (a :class:`mbs.errors.UserError`: the command ends with the message and exit
    status 2).

    Attributes:
        problems: One line per bad value (the message is the line itself when there is one).
    """

    def __init__(self, problems: str | list[str]):
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        n = len(self.problems)
        super().__init__(self.problems[0] if n == 1 else f"{n} config errors:\n  " + "\n  ".join(self.problems))


@dataclass(frozen=True)
class Num:
    """A number in ``[lo, hi]`` (``lo_open``/``hi_open``: the bound itself is excluded).

    Attributes:
        integer: Only integers (a float with an integral value, e.g. ``8.0``, is accepted).
        lo, hi: Bounds (``None``: unbounded).
        lo_open, hi_open: Exclude the bound.
        nullable: ``null`` is allowed (it means "no limit" / "default" where the key says so).
    """

    integer: bool = False
    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False
    nullable: bool = False

    def describe(self) -> str:
        kind = "an integer" if self.integer else "a number"
        parts = []
        if self.lo is not None:
            parts.append(f"{'>' if self.lo_open else '>='} {self.lo:g}")
        if self.hi is not None:
            parts.append(f"{'<' if self.hi_open else '<='} {self.hi:g}")
        text = kind + (" " + " and ".join(parts) if parts else "")
        return text + (" or null" if self.nullable else "")

    def check(self, value: Any) -> bool:
        if value is None:
            return self.nullable
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if isinstance(value, float) and not math.isfinite(value):
            return False
        if self.integer and isinstance(value, float) and not value.is_integer():
            return False
        if self.lo is not None and (value <= self.lo if self.lo_open else value < self.lo):
            return False
        if self.hi is not None and (value >= self.hi if self.hi_open else value > self.hi):
            return False
        return True


@dataclass(frozen=True)
class OneOf:
    """One of a fixed set of values."""

    values: tuple[Any, ...]

    def describe(self) -> str:
        return "one of " + ", ".join("null" if v is None else str(v) for v in self.values)

    def check(self, value: Any) -> bool:
        return any(value == v and type(value) is type(v) for v in self.values)


@dataclass(frozen=True)
class ListOf:
    """A list whose every item passes ``item`` (``nonempty``: at least one item)."""

    item: Num
    nonempty: bool = True

    def describe(self) -> str:
        return f"a {'non-empty ' if self.nonempty else ''}list of {self.item.describe()}"

    def check(self, value: Any) -> bool:
        if not isinstance(value, (list, tuple)):
            return False
        if self.nonempty and not value:
            return False
        return all(self.item.check(v) for v in value)


Check = Num | OneOf | ListOf

COUNT = Num(integer=True, lo=1)  # a count of at least one (N, n, K, ...)
NONNEG = Num(integer=True, lo=0)
BUDGET = Num(integer=True, lo=1)  # a budget L / max_tokens in tokens
SHARE = Num(lo=0, hi=1)  # a rate or threshold in [0, 1]

#: The range of each MagicBeanStalk threshold (:class:`mbs.synth.settings.Thresholds` checks them
#: too). N_d counts retries after the first decomposition try (paper: "up to N_d = 3 retries"): 0
#: is one try.
THRESHOLD_RANGES: dict[str, Num] = {
    "K": COUNT, "D": COUNT, "N_d": NONNEG, "N_t": COUNT, "N_l": COUNT, "N_c": COUNT, "N": COUNT,
    "alpha_leaf": SHARE, "alpha_parent": SHARE,
}
TEMPERATURE = Num(lo=0)
TOP_P = Num(lo=0, lo_open=True, hi=1)
SECONDS = Num(lo=0, lo_open=True)

#: (key pattern, check). ``*`` matches any mapping key or list index.
RULES: tuple[tuple[str, Check], ...] = (
    ("seed", Num(integer=True)),
    ("log_level", OneOf(("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"))),
    ("shard.index", NONNEG),
    ("shard.count", COUNT),
    # data (also every benchmark's data block)
    ("data.limit", Num(integer=True, lo=0, nullable=True)),
    ("data.on_error", OneOf(("raise", "skip"))),
    ("data.max_prompt_chars", Num(integer=True, lo=1, nullable=True)),
    ("data.heldout_fraction", SHARE),
    ("eval.benchmarks.*.data.limit", Num(integer=True, lo=0, nullable=True)),
    ("eval.benchmarks.*.data.on_error", OneOf(("raise", "skip"))),
    # budgets and thresholds
    ("budget.L", BUDGET),
    ("budget.list", ListOf(BUDGET)),
    *((f"thresholds.{k}", check) for k, check in THRESHOLD_RANGES.items()),
    ("thresholds.N_goose", COUNT),
    # calibration
    ("calibrate.n", COUNT),
    ("calibrate.budgets", ListOf(BUDGET)),
    ("calibrate.temperature", TEMPERATURE),
    ("calibrate.top_p", TOP_P),
    ("calibrate.early_stop.batch", COUNT),
    ("calibrate.early_stop.decision", OneOf(("band", "above_alpha"))),
    ("calibrate.early_stop.alpha", SHARE),
    ("calibrate.hard_seed_budget", Num(integer=True, lo=1, nullable=True)),
    # policies: students, teachers, judges, evaluated models
    ("students.policies.*.budget", Num(integer=True, lo=1, nullable=True)),
    ("students.policies.*.source", OneOf(("live", "recorded"))),
    ("teacher.pool.*.max_tokens", NONNEG),
    ("teacher.pool.*.temperature", TEMPERATURE),
    ("mbs.judges.pool.*.max_tokens", BUDGET),
    ("mbs.judges.pool.*.temperature", TEMPERATURE),
    # synthesis
    ("synth.temperature", TEMPERATURE),
    ("synth.top_p", TOP_P),
    ("synth.early_stop_batch", COUNT),
    ("synth.seeds_limit", Num(integer=True, lo=0, nullable=True)),
    ("mbs.trace_batch", COUNT),
    ("mbs.parents_per_node", COUNT),
    ("mbs.max_chars", COUNT),
    ("mbs.max_answer_chars", COUNT),
    ("mbs.grounding.top_k", COUNT),
    ("direct.n_variants", COUNT),
    ("direct.cost_match_on", OneOf(("all_tokens", "teacher_tokens"))),
    ("goose.options", Num(integer=True, lo=2)),
    ("goose.filter.n", COUNT),
    ("goose.filter.budget", Num(integer=True, lo=1, nullable=True)),  # null: the student's budget L
    ("goose.span.max_share", SHARE),
    ("goose.span.recoverable_overlap", SHARE),
    ("goose.on_error", OneOf(("raise", "skip"))),
    ("goose.audit.policy", OneOf(("reject", "rebuild", "report"))),
    ("goose.audit.rebuilds", Num(integer=True, lo=0)),
    ("goose.audit.alpha", Num(lo=0, hi=1)),
    # evaluation
    ("eval.k", COUNT),
    ("eval.budgets", ListOf(BUDGET)),
    ("eval.pass_k", ListOf(COUNT)),
    ("eval.limit", Num(integer=True, lo=0, nullable=True)),
    ("eval.temperature", TEMPERATURE),
    ("eval.top_p", TOP_P),
    # export
    ("export.split.val_fraction", Num(lo=0, hi=1, hi_open=True)),
    ("export.dedup.near.threshold", SHARE),
    ("export.decontam.n", COUNT),
    ("export.mix.total", Num(integer=True, lo=1, nullable=True)),
    # grading
    ("verifier.workers", Num(integer=True, lo=0, nullable=True)),
    ("verifier.timeout_s", SECONDS),
    ("verifier.wall_timeout_s", Num(lo=0, lo_open=True, nullable=True)),
    # backends (the stage's own and every policy's)
    *(
        (f"{prefix}.{key}", check)
        for prefix in ("backend", "students.policies.*.backend", "teacher.pool.*.backend", "eval.models.*.backend")
        for key, check in (
            ("max_concurrency", COUNT),
            ("timeout_s", SECONDS),
            ("max_retries", NONNEG),
            ("n_ctx", COUNT),
            ("n_batch", COUNT),
            ("n_threads", Num(integer=True, lo=1, nullable=True)),
            ("instances", Num(integer=True, lo=1, nullable=True)),
            ("batch_samples", Num(integer=True, lo=0, hi=256)),
            ("prefix_cache_mib", Num(integer=True, lo=0)),
            ("max_model_len", Num(integer=True, lo=1, nullable=True)),
            ("tensor_parallel_size", COUNT),
            ("gpu_memory_utilization", Num(lo=0, lo_open=True, hi=1)),
            ("batch_size", COUNT),
            ("top_k", Num(integer=True, lo=0)),
            ("min_p", Num(lo=0, hi=1)),
            ("device", OneOf(("auto", "cpu", "cuda"))),
        )
    ),
    # training: the policy (null: the calibrated value) and TRL's trainer
    ("train.engine", OneOf(("verl", "trl"))),
    ("train.launcher", OneOf(("local", "submitit"))),
    *(
        (f"{prefix}.{key}", check)
        for prefix in ("train", "train.uncalibrated")
        for key, check in (
            ("group_size", Num(integer=True, lo=1, nullable=True)),
            ("max_completion_length", Num(integer=True, lo=1, nullable=True)),
            ("temperature", Num(lo=0, nullable=True)),
            ("top_p", Num(lo=0, lo_open=True, hi=1, nullable=True)),
            ("top_k", Num(integer=True, lo=0, nullable=True)),
            ("min_p", Num(lo=0, hi=1, nullable=True)),
            ("reasoning_format", OneOf((None, "auto", "none", "think", "think_open", "harmony", "server"))),
        )
    ),
    ("train.trl.max_steps", COUNT),
    ("train.trl.prompts_per_step", COUNT),
    ("train.trl.gradient_accumulation_steps", COUNT),
    ("train.trl.learning_rate", Num(lo=0, lo_open=True)),
    ("train.trl.beta", Num(lo=0)),
    ("train.trl.save_steps", COUNT),
    ("train.trl.save_total_limit", Num(integer=True, lo=1, nullable=True)),
    *((f"train.trl.{k}", OneOf((True, False))) for k in ("resume", "bf16", "use_vllm", "gradient_checkpointing", "progress")),
    # resume
    ("resume.allow_config_change", OneOf((True, False))),
)


#: Config nodes that are backends (built with their ``_target_``).
BACKEND_NODES = (
    "backend", "students.policies.*.backend", "teacher.pool.*.backend", "mbs.judges.pool.*.backend",
    "eval.models.*.backend",
)
#: Keys of a backend node that are not constructor arguments (Hydra's and mbs's own).
META_KEYS = frozenset({"_target_", "_convert_", "_recursive_", "_partial_", "_args_", *NON_ARGS})


def validate_config(cfg: Any) -> None:
    """Check every value of ``cfg`` that :data:`RULES` covers, the cross-key rules and the keys
    of every backend node (:data:`BACKEND_NODES`).

    Args:
        cfg: A composed stage config (``DictConfig``); keys it lacks are skipped.

    Raises:
        ConfigError: Every bad value, one line each: ``<key>=<value>: must be <valid range>``,
            ``<key>: not a setting of <class> ...`` (the value of an unknown key is not shown).
    """
    plain = plain_config(cfg)
    problems = [
        _problem(key, value, check) for pattern, check in RULES for key, value in select(plain, pattern)
    ]
    problems += [_check_shard(plain), *_check_context_windows(plain), *_check_backend_keys(plain)]
    problems = list(dict.fromkeys(p for p in problems if p))
    if problems:
        raise ConfigError(problems)


def check_value(key: str, value: Any, check: Check) -> Any:
    """Check one value (used by library code for values that come from outside the config).

    Returns:
        ``value`` unchanged.

    Raises:
        ConfigError: The value fails ``check`` (names ``key`` and the valid range).
    """
    _check(key, value, check)
    return value


def _check(key: str, value: Any, check: Check) -> None:
    problem = _problem(key, value, check)
    if problem:
        raise ConfigError(problem)


def _problem(key: str, value: Any, check: Check) -> str | None:
    return None if check.check(value) else f"{key}={_show(value)}: must be {check.describe()}"


def _show(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, str):
        return repr(value)
    return str(value)


def _check_shard(cfg: Any) -> str | None:
    index, count = _get(cfg, "shard.index"), _get(cfg, "shard.count")
    if index is _ABSENT or count is _ABSENT:
        return None
    if isinstance(index, (int, float)) and isinstance(count, (int, float)) and not index < count:
        return f"shard.index={index}: must be in [0, shard.count) = [0, {count})"
    return None


def _check_backend_keys(cfg: Any) -> Iterator[str]:
    """Keys of a backend node that its class does not take (they would end the run later, in
    the backend's constructor, after the config was written; an ``api_key`` would be written)."""
    seen: list[Any] = []
    for pattern in BACKEND_NODES:
        for where, node in select(cfg, pattern):
            if not isinstance(node, dict) or node in seen:  # a policy's ${backend}: checked once
                continue
            seen.append(node)
            target = node.get("_target_")
            params = _arguments(target)
            if params is None:
                continue
            for key in node:
                if key not in params and key not in META_KEYS:
                    yield (f"{where}.{key}: not a setting of {target} (its settings: {', '.join(sorted(params))}; "
                           "an API key is read from the environment variable named by api_key_env)")


@lru_cache(maxsize=64)
def _arguments(target: Any) -> frozenset[str] | None:
    """The keyword arguments of the class ``target`` names (``None``: unknown, not importable
    here, or it takes ``**kwargs``)."""
    if not isinstance(target, str) or "." not in target:
        return None
    module, _, name = target.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), name)
        params = inspect.signature(cls).parameters.values()
    except Exception:  # noqa: BLE001 - a missing extra or a bad _target_ fails where it is built
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    return frozenset(p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))


def _check_context_windows(cfg: Any) -> Iterator[str]:
    """Budgets L must fit the context window of the backend that draws them (where known)."""
    calib = _get(cfg, "calibrate.budgets")
    calib = calib if isinstance(calib, list) else _ABSENT  # a bad list is reported by its rule
    # students draw rollouts in calibration and synthesis only (train, evaluate, export compose them unused)
    students = _get(cfg, "students.policies") if "calibrate" in cfg or "synth" in cfg else _ABSENT
    for name, pol in _items(students):
        if not isinstance(pol, dict) or pol.get("source", "live") != "live":
            continue
        window = _window(pol.get("backend"))
        if window is None:
            continue
        if calib is not _ABSENT:
            for b in calib:
                yield from _fits("calibrate.budgets", b, window, f"students.policies.{name}")
        if pol.get("budget") is not None:
            yield from _fits(f"students.policies.{name}.budget", pol["budget"], window, f"students.policies.{name}")
    for i, pol in _items(_get(cfg, "teacher.pool") if "synth" in cfg else _ABSENT):
        if isinstance(pol, dict) and pol.get("max_tokens"):
            window = _window(pol.get("backend"))
            if window is not None:
                yield from _fits(f"teacher.pool.{i}.max_tokens", pol["max_tokens"], window, f"teacher.pool.{i}")
    budgets = _get(cfg, "eval.budgets")
    budgets = budgets if isinstance(budgets, list) else _ABSENT
    for name, model in _items(_get(cfg, "eval.models")):
        window = _window(model.get("backend")) if isinstance(model, dict) else None
        if window is not None and budgets is not _ABSENT:
            for b in budgets:
                yield from _fits("eval.budgets", b, window, f"eval.models.{name}")


def _window(backend: Any) -> int | None:
    if not isinstance(backend, dict):
        return None
    for key in ("n_ctx", "max_model_len"):
        value = backend.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def _fits(key: str, budget: Any, window: int, owner: str) -> Iterator[str]:
    if isinstance(budget, (int, float)) and budget >= window:
        yield (
            f"{key}={budget}: must be < the context window of {owner} ({window} tokens, its backend's "
            "n_ctx / max_model_len); the prompt and the budget L must fit in it together"
        )


# -- reading a config by pattern -----------------------------------------------------------


def plain_config(cfg: Any) -> Any:
    """A plain, resolved copy of ``cfg`` (``${hydra:...}`` and other unresolvable values stay strings)."""
    from omegaconf import DictConfig, ListConfig

    if not isinstance(cfg, (DictConfig, ListConfig)):
        return cfg

    def rec(node: Any) -> Any:
        if isinstance(node, DictConfig):
            return {k: _resolve(node, k, rec) for k in node}
        if isinstance(node, ListConfig):
            return [_resolve(node, i, rec) for i in range(len(node))]
        return node

    return rec(cfg)


def _resolve(node: Any, key: Any, rec: Callable[[Any], Any]) -> Any:
    try:
        return rec(node[key])
    except Exception:  # noqa: BLE001 - ${hydra:...} outside a run, missing ??? values, ...
        return _ABSENT


def _get(cfg: Any, key: str) -> Any:
    hits = list(select(cfg, key))
    return hits[0][1] if hits else _ABSENT


def _items(node: Any) -> Iterator[tuple[Any, Any]]:
    if isinstance(node, dict):
        yield from node.items()
    elif isinstance(node, list):
        yield from enumerate(node)


def select(cfg: Any, pattern: str) -> Iterator[tuple[str, Any]]:
    """``(key, value)`` of every key of a :func:`plain_config` matching ``pattern`` (``*``: any
    mapping key or list index) that is present and resolvable."""
    root = cfg

    def walk(node: Any, parts: list[str], path: str) -> Iterator[tuple[str, Any]]:
        if not parts:
            if node is not _ABSENT:
                yield path, node
            return
        head, rest = parts[0], parts[1:]
        for k, child in _items(node):
            if head == "*" or str(k) == head:
                yield from walk(child, rest, f"{path}.{k}" if path else str(k))

    yield from walk(root, pattern.split("."), "")

