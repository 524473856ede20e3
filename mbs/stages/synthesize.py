"""Synthesis: grow new training problems with a registered method.

Run: ``mbs-synthesize method=mbs calibration_dir=CAL hydra.run.dir=DIR`` (likewise
``method=direct``), or ``mbs-synthesize method=goose goose.source=champ goose.teacher_free=true``.

Methods are registered in :data:`mbs.synth.methods.METHODS` (a :class:`~mbs.synth.methods.MethodSpec`
each); each is a function ``(cfg, out: RunDir) -> summary dict`` that writes its records into
``out`` and returns its summary. This stage writes the config first, then (after the method)
``summary.json``, the figures (the spec's ``figures``, when ``synth.figures`` is on) and
``manifest.json`` last.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from omegaconf import DictConfig

from mbs.errors import UnknownNameError
from mbs.stages.config import open_run, validate_config
from mbs.synth.methods import METHODS, MethodSpec
from mbs.training.provenance import sampled_distributions

log = logging.getLogger(__name__)

STAGE = "synthesize"


def method_spec(name: str) -> MethodSpec:
    """The spec of synthesis method ``name``.

    Raises:
        UnknownNameError: Unknown method (lists the valid ones).
    """
    if name not in METHODS:
        raise UnknownNameError(f"method={name!r} is not a synthesis method; valid: {METHODS.names()}")
    return METHODS.get(name)


def run(cfg: DictConfig) -> Path:
    """Run ``cfg.method`` into ``cfg.out_dir``.

    Returns:
        The run directory.
    """
    validate_config(cfg)
    logging.getLogger("mbs").setLevel(cfg.log_level)
    spec = method_spec(cfg.method)
    out = open_run(cfg, cfg.out_dir, STAGE, cfg.shard.index, cfg.shard.count)
    out.record_distribution(sampled_distributions(cfg.students.policies, cfg.synth.temperature, cfg.synth.top_p))
    t0 = time.perf_counter()
    summary = spec.run(cfg, out)
    out.timings["synthesize"] = time.perf_counter() - t0
    out.write_summary({"method": cfg.method, **summary})
    if cfg.synth.figures:
        t1 = time.perf_counter()
        drawn = spec.figures(out.path, out.path / "figures")
        out.timings["figures"] = time.perf_counter() - t1
        if drawn.get("skipped"):
            log.info("figures skipped: %s", drawn["skipped"])
        if spec.figures_in_summary:
            summary["figures"] = {"written": len(drawn["written"]), "skipped": drawn["skipped"]}
            out.write_summary({"method": cfg.method, **summary})
    out.write_manifest(summary.get("counts", {}), backends=summary.get("backends", {}))
    log.info("synthesis (%s) written to %s", cfg.method, out.path)
    return out.path
