"""Synthesis: grow new training problems with a registered method.

Run: ``mbs-synthesize method=mbs calibration_dir=CAL hydra.run.dir=DIR`` (likewise
``method=direct``), or ``mbs-synthesize method=goose goose.source=champ goose.teacher_free=true``.

Methods register themselves in :data:`METHODS` (``mbs.synth.<module>``); each is a function
``(cfg, out: RunDir) -> summary dict`` that writes its records into ``out`` and returns its
summary. This stage writes the config first, then (after the method) ``summary.json``, the
figures (:data:`mbs.figures.BY_STAGE`, when ``synth.figures`` is on) and ``manifest.json`` last.
"""

from __future__ import annotations

import importlib
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from mbs.errors import UnknownNameError
from mbs.figures import BY_STAGE
from mbs.io import RunDir
from mbs.training.provenance import sampled_distributions
from mbs.validate import validate_config

log = logging.getLogger(__name__)

STAGE = "synthesize"

#: method name -> "module:function" implementing it (imported on use).
METHODS: dict[str, str] = {
    "mbs": "mbs.synth.beanstalk:run",
    "direct": "mbs.synth.direct:run",
    "goose": "mbs.synth.goose.run:run",
}


#: methods whose summary records what their figures wrote (Golden Goose's report reads it).
FIGURES_IN_SUMMARY = frozenset({"goose"})


def _function(spec: str) -> Callable[..., Any]:
    module, _, fn = spec.partition(":")
    return getattr(importlib.import_module(module), fn)


def method_fn(name: str) -> Callable[[DictConfig, RunDir], dict[str, Any]]:
    """The function implementing synthesis method ``name``.

    Raises:
        KeyError: Unknown method (lists the valid ones).
    """
    if name not in METHODS:
        raise UnknownNameError(f"method={name!r} is not a synthesis method; valid: {sorted(METHODS)}")
    return _function(METHODS[name])


def run(cfg: DictConfig) -> Path:
    """Run ``cfg.method`` into ``cfg.out_dir``.

    Returns:
        The run directory.
    """
    validate_config(cfg)
    logging.getLogger("mbs").setLevel(cfg.log_level)
    fn = method_fn(cfg.method)
    out = RunDir(cfg.out_dir, STAGE, cfg.shard.index, cfg.shard.count, cfg=cfg)
    out.write_config(cfg)
    out.record_distribution(sampled_distributions(cfg, "synth"))
    t0 = time.perf_counter()
    summary = fn(cfg, out)
    out.timings["synthesize"] = time.perf_counter() - t0
    out.write_summary({"method": cfg.method, **summary})
    if cfg.synth.figures:
        t1 = time.perf_counter()
        drawn = _function(BY_STAGE[f"{STAGE}/{cfg.method}"])(out.path, out.path / "figures")
        out.timings["figures"] = time.perf_counter() - t1
        if drawn.get("skipped"):
            log.info("figures skipped: %s", drawn["skipped"])
        if cfg.method in FIGURES_IN_SUMMARY:
            summary["figures"] = {"written": len(drawn["written"]), "skipped": drawn["skipped"]}
            out.write_summary({"method": cfg.method, **summary})
    out.write_manifest(summary.get("counts", {}), backends=summary.get("backends", {}))
    log.info("synthesis (%s) written to %s", cfg.method, out.path)
    return out.path
