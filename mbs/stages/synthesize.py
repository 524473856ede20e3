"""Synthesis: grow new training problems with a registered method.

Run: ``mbs-synthesize method=mbs calibration_dir=CAL hydra.run.dir=DIR`` (likewise
``method=direct``), or ``mbs-synthesize method=goose goose.source=champ goose.teacher_free=true``.

Methods are registered in :data:`mbs.synth.methods.METHODS` (a :class:`~mbs.synth.methods.MethodSpec`
each); each is a function ``(settings, out: RunDir) -> summary dict`` that writes its records into
``out`` and returns its summary. This stage writes the config first, reads it once into a
:class:`~mbs.synth.settings.SynthSettings` (the only thing a method sees of it), then (after the method)
``summary.json``, the figures (the spec's ``figures``, when ``synth.figures`` is on) and
``manifest.json`` last.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from mbs.calibration.students import StudentSet
from mbs.errors import UnknownNameError
from mbs.runs.policy import sampled_distributions
from mbs.stages.config import open_run, validate_config
from mbs.synth.methods import METHODS, MethodSpec
from mbs.synth.settings import (
    DirectSettings,
    GooseSettings,
    MbsSettings,
    Sampling,
    SeedInputs,
    SynthSettings,
    Thresholds,
    plain,
)

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


def synth_settings(cfg: DictConfig) -> SynthSettings:
    """Read the composed ``synthesize`` config once into the settings a method sees.

    Raises:
        ConfigError: A value out of its range (names the key).
        ValueError: A student policy with an unknown source, or a live one without a backend.
    """
    own = cfg.get(str(cfg.method))
    return SynthSettings(
        method=str(cfg.method),
        sampling=Sampling.from_cfg(cfg.synth, cfg.seed, cfg.paths.cache_dir),
        inputs=SeedInputs.from_cfg(cfg.calibration_dir, cfg.shard, cfg.synth),
        thresholds=Thresholds.from_cfg(cfg.thresholds),
        thresholds_record=OmegaConf.to_container(cfg.thresholds, resolve=True),  # type: ignore[arg-type]
        templates={str(k): str(v) for k, v in cfg.synth.templates.items()},
        verifier=plain(cfg.verifier),
        teacher_pool=plain(cfg.teacher.pool),
        students=StudentSet.from_cfg(plain(cfg.students)),
        mbs=MbsSettings.from_cfg(cfg.mbs),
        direct=DirectSettings.from_cfg(cfg.direct),
        goose=GooseSettings.from_cfg(cfg.goose, cfg.data.limit),
        method_config=plain(own),
    )


def run(cfg: DictConfig) -> Path:
    """Run ``cfg.method`` into ``cfg.out_dir``.

    Returns:
        The run directory.
    """
    validate_config(cfg)
    logging.getLogger("mbs").setLevel(cfg.log_level)
    spec = method_spec(cfg.method)
    settings = synth_settings(cfg)  # before the run directory: a bad value leaves nothing behind
    out = open_run(cfg, cfg.out_dir, STAGE, cfg.shard.index, cfg.shard.count, extra_keys=spec.record_keys)
    out.record_distribution(sampled_distributions(cfg.students.policies, cfg.synth.temperature, cfg.synth.top_p))
    t0 = time.perf_counter()
    summary = spec.run(settings, out)
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
