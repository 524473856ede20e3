"""The stage boundary's handling of the whole config: checked, read by key pattern, saved.

Every stage's ``run(cfg)`` calls :func:`validate_config` first (the checks of
:data:`mbs.validate.RULES` and the rules that span keys), then opens its run directory with
:func:`open_run`, which hands :class:`mbs.io.RunDir` what it needs of the config and nothing
more: the sampling config its records are drawn under (:func:`sampling_config`, checked before
the run is admitted), whether ``resume.allow_config_change`` is set, and the text of
``config.yaml`` (:func:`config_yaml`). The command line (``mbs/cli.py``) holds Hydra's files back
until a run is admitted with :func:`staged_hydra_outputs` (:func:`mbs.launch.staged_outputs`
writes what :func:`hydra_files` renders). Library code below ``mbs/stages/`` never takes the
config.

Beyond single values, :func:`validate_config` checks what spans keys: ``shard.index`` is in
``[0, shard.count)``, ``export.weights`` have a positive sum and ``export.runs`` holds run
folders, and a budget L (``calibrate.budgets``, a student's ``budget``, a
teacher's ``max_tokens``, ``eval.budgets``) fits the context window of the backend that
draws it where the window is known (``backend.n_ctx`` of llama.cpp, ``max_model_len`` of
vLLM). llama.cpp reads ``max_tokens <= 0`` as "until the context is full", so a budget that
is not positive would generate without bound. Every backend node (:data:`mbs.validate.BACKEND_NODES`)
may hold only the arguments of the class its ``_target_`` names (plus ``label``): an unknown key
such as ``api_key`` is refused before anything is written, and the message never shows its value.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, ListConfig, OmegaConf

from mbs.io import RunDir
from mbs.launch import redact_file, staged_outputs
from mbs.redact import redact_obj
from mbs.validate import BACKEND_NODES, META_KEYS, RULES, ConfigError, problem

#: Marks a key that is absent from the config (the check is skipped).
_ABSENT: Any = object()

#: Per stage, the config keys (patterns, ``*``: any key or index) that decide what a record
#: drawn into its run directory is; a resumed run must use the same values. Stages that draw
#: nothing (export, figures, merge, train, pipeline: its steps have their own directories)
#: have none. Operational keys (:data:`OPERATIONAL_KEYS`) may change between runs.
SAMPLING_KEYS: dict[str, tuple[str, ...]] = {
    "calibrate": (
        "seed", "calibrate.temperature", "calibrate.top_p", "calibrate.templates",
        "students.policies.*.name", "students.policies.*.source", "students.policies.*.model",
        "students.policies.*.backend",
    ),
    "synthesize": (
        "seed", "method", "synth", "students.policies", "teacher.pool", "thresholds",
        "mbs.templates", "direct.templates", "goose.teacher.templates",
    ),
    "evaluate": ("seed", "eval.temperature", "eval.top_p", "eval.templates", "eval.models"),
    "thesis": (
        "thesis.data", "thesis.n", "thesis.budget", "thesis.temperature", "thesis.top_p", "thesis.heldout",
        "thesis.set_size", "thesis.split_seed", "thesis.steps", "thesis.eval_every", "thesis.prompts_per_step",
        "thesis.learning_rate", "thesis.beta", "thesis.loss_type", "thesis.eval_k", "backend", "answer_templates",
    ),
}

#: Keys that change how or where, not what, a backend draws (never part of the sampling config;
#: ``base_url``: where the model is served, not which model it is).
OPERATIONAL_KEYS = frozenset(
    {"base_url", "max_concurrency", "timeout_s", "max_retries", "n_threads", "n_batch", "api_key_env", "use_n", "gpu_memory_utilization",
     "figures", "seeds_limit", "early_stop", "early_stop_batch"}
)


# -- the run directory and the files that save the config ----------------------------------


def open_run(
    cfg: Any, path: str | Path, stage: str, shard_index: int = 0, shard_count: int = 1, extra_keys: tuple[str, ...] = ()
) -> RunDir:
    """Open ``stage``'s run directory for ``cfg`` and save the config there.

    The sampling config (:func:`sampling_config`) is checked before the run is admitted; then
    ``config.yaml`` (:func:`config_yaml`) and ``git.json`` are written.

    Args:
        cfg: The stage's composed config (``DictConfig``).
        path: The run directory (created if missing).
        stage: Stage name (picks the :data:`SAMPLING_KEYS`; written into the manifest).
        shard_index: This process's shard.
        shard_count: Number of shards.
        extra_keys: Keys (patterns) added to the stage's :data:`SAMPLING_KEYS` (a synthesis
            method's own, :attr:`mbs.synth.methods.MethodSpec.sampling_keys`).

    Returns:
        The admitted :class:`mbs.io.RunDir`.

    Raises:
        mbs.run_lock.RunDirError: Another process holds the directory, or its records were drawn
            under another sampling config and ``resume.allow_config_change`` is not true.
    """
    out = RunDir(path, stage, shard_index, shard_count, sampling=sampling_config(cfg, stage, extra_keys),
                 allow_config_change=allow_config_change(cfg))
    out.write_config(config_yaml(cfg))
    return out


def allow_config_change(cfg: Any) -> bool:
    """Whether ``resume.allow_config_change`` is ``true`` (a resumed run keeps the records drawn
    under an older sampling config)."""
    return OmegaConf.select(cfg, "resume.allow_config_change", default=False) is True


def config_yaml(cfg: Any) -> str:
    """The text of ``config.yaml``: ``cfg`` resolved except for environment lookups
    (:func:`safe_resolved`), every URL redacted (:mod:`mbs.redact`)."""
    return OmegaConf.to_yaml(OmegaConf.create(redact_obj(OmegaConf.to_container(safe_resolved(cfg), resolve=False))))


def sampling_config(cfg: Any, stage: str, extra_keys: tuple[str, ...] = ()) -> dict[str, Any]:
    """The values of ``stage``'s :data:`SAMPLING_KEYS` and of ``extra_keys`` in ``cfg``
    (resolved, URLs redacted, operational keys dropped), flattened to ``{dotted key: value}``."""
    plain = plain_config(cfg)
    out: dict[str, Any] = {}
    for pattern in (*SAMPLING_KEYS.get(stage, ()), *extra_keys):
        for key, value in select(plain, pattern):
            _flatten(redact_obj(value), key, out)
    return out


def _flatten(node: Any, prefix: str, out: dict[str, Any]) -> None:
    if isinstance(node, dict):
        for k, v in node.items():
            if k not in OPERATIONAL_KEYS:
                _flatten(v, f"{prefix}.{k}", out)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            _flatten(v, f"{prefix}.{i}", out)
    elif node is None or isinstance(node, (str, int, float, bool)):  # not an unresolvable value
        out[prefix] = node


def safe_resolved(cfg: Any) -> Any:
    """A resolved copy of ``cfg`` in which ``${oc.env:...}`` values stay as written.

    mbs never puts secrets into configs (API keys are read from the environment variable a
    config names), and this keeps a user's own ``${oc.env:...}`` out of saved files as well.
    Values that cannot be resolved outside a Hydra run (``${hydra:...}``) stay as written.
    """
    def rec(node: Any, path: str) -> Any:
        if isinstance(node, dict):
            return {k: rec(v, f"{path}.{k}" if path else str(k)) for k, v in node.items()}
        if isinstance(node, list):
            return [rec(v, f"{path}[{i}]") for i, v in enumerate(node)]
        if isinstance(node, str) and "${" in node and "oc.env" not in node:
            try:
                value = OmegaConf.select(cfg, path, throw_on_missing=False)
            except Exception:  # noqa: BLE001 - e.g. ${hydra:...} outside a Hydra run
                return node
            if isinstance(value, (DictConfig, ListConfig)):
                return rec(OmegaConf.to_container(value, resolve=False), path)
            return value
        return node

    return OmegaConf.create(rec(OmegaConf.to_container(cfg, resolve=False), ""))


def hydra_files(cfg: Any, hydra_node: Any) -> dict[str, str]:
    """The texts of Hydra's ``.hydra/`` files, as Hydra would write them, every URL redacted:
    ``config.yaml`` (the task config as composed, unresolved), ``hydra.yaml`` and ``overrides.yaml``."""
    def dump(node: Any) -> str:
        return OmegaConf.to_yaml(OmegaConf.create(redact_obj(node)))

    hydra = OmegaConf.to_container(hydra_node, resolve=False)
    assert isinstance(hydra, dict)
    return {
        "config.yaml": dump(OmegaConf.to_container(cfg, resolve=False)),
        "hydra.yaml": dump({"hydra": hydra}),
        "overrides.yaml": dump(list(hydra.get("overrides", {}).get("task", []))),
    }


@contextmanager
def staged_hydra_outputs(cfg: Any) -> Iterator[None]:
    """Hold Hydra's files (:func:`hydra_files`) and job log back from the run directory until a
    run is admitted there (:func:`mbs.launch.staged_outputs`). In a multirun, the sweep's
    ``multirun.yaml`` is redacted first (:func:`mbs.launch.redact_file`: a URL with a credential
    from a config file, in any form Hydra writes it).

    Outside a Hydra run (tests calling a stage) it does nothing.

    Args:
        cfg: The task config Hydra passed to the entry point.
    """
    if not HydraConfig.initialized():
        yield
        return
    hydra_node = HydraConfig.get()
    if hydra_node.mode == RunMode.MULTIRUN:  # written by Hydra's sweeper, before any job started
        redact_file(Path(hydra_node.runtime.cwd) / str(hydra_node.sweep.dir) / "multirun.yaml")
    with staged_outputs(Path(hydra_node.runtime.output_dir), lambda: hydra_files(cfg, hydra_node)):
        yield


# -- checks ----------------------------------------------------------------------------------


def validate_config(cfg: Any) -> None:
    """Check every value of ``cfg`` that :data:`mbs.validate.RULES` covers, the cross-key rules
    and the keys of every backend node (:data:`mbs.validate.BACKEND_NODES`).

    Args:
        cfg: A composed stage config (``DictConfig``); keys it lacks are skipped.

    Raises:
        mbs.validate.ConfigError: Every bad value, one line each: ``<key>=<value>: must be
            <valid range>``, ``<key>: not a setting of <class> ...`` (the value of an unknown key
            is not shown).
    """
    plain = plain_config(cfg)
    found = [problem(key, value, check) for pattern, check in RULES for key, value in select(plain, pattern)]
    found += [_check_shard(plain), *_check_context_windows(plain), *_check_backend_keys(plain), *_check_export(plain)]
    problems = list(dict.fromkeys(p for p in found if p))
    if problems:
        raise ConfigError(problems)


def _check_shard(cfg: Any) -> str | None:
    index, count = _get(cfg, "shard.index"), _get(cfg, "shard.count")
    if index is _ABSENT or count is _ABSENT:
        return None
    if isinstance(index, (int, float)) and isinstance(count, (int, float)) and not index < count:
        return f"shard.index={index}: must be in [0, shard.count) = [0, {count})"
    return None


def _check_export(cfg: Any) -> Iterator[str]:
    """``export.weights`` (a mapping of weights with a positive sum: each weight's range is its
    rule) and ``export.runs`` (run folders, or ``{name, path}`` items)."""
    weights = _get(cfg, "export.weights")
    if weights is not _ABSENT and weights is not None:
        if not isinstance(weights, dict):
            yield f"export.weights={weights!r}: must be a mapping of source name to weight, or null"
        elif weights and all(isinstance(w, (int, float)) and not isinstance(w, bool) and w >= 0 for w in weights.values()) \
                and not sum(weights.values()) > 0:
            yield f"export.weights={weights}: the weights must have a positive sum"
    runs = _get(cfg, "export.runs")
    if runs is _ABSENT:
        return
    if not isinstance(runs, list):
        yield f"export.runs={runs!r}: must be a list of run folders (or {{name: NAME, path: DIR}} items)"
        return
    for i, item in enumerate(runs):
        ok = (isinstance(item, str) and item.strip()) or (
            isinstance(item, dict) and set(item) == {"name", "path"} and all(isinstance(v, str) and v.strip() for v in item.values()))
        if not ok:
            yield f"export.runs.{i}={item!r}: must be a run folder or {{name: NAME, path: DIR}}"


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
