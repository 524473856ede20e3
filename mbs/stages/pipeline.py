"""The main job: calibrate -> synthesize -> export -> figures and report.

Run: ``mbs-pipeline`` (no arguments: the embedded default) or e.g.
``mbs-pipeline pipeline.live.limit=20 hydra.run.dir=outputs/my_study``.

Each step is the plain ``run(cfg)`` of its stage, pointed at a sub-folder of the pipeline's
run directory: ``calibrate_recorded/`` (CHAMP's four recorded models on every auto-verifiable
problem), ``calibrate_live/`` (the configured student set on ``pipeline.live.limit``
problems), ``calibrate_difficulty/`` (the student set on Reasoning Gym problems at several
difficulty levels and budgets, ``pipeline.difficulty``), ``synthesize_<method>/`` (each of
``pipeline.synthesize.methods`` on the live step's hard seeds), ``synthesize_direct_cost_matched/``
(the direct baseline given MBS's teacher tokens per seed), ``export/`` (verl parquet),
``figures/``, ``tables/`` and ``report.html`` (with the MBS-versus-direct table).
Rerunning with the same ``hydra.run.dir`` resumes every step.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import ConfigKeyError

from mbs.data.reasoning_gym import levels_of
from mbs.errors import ConfigError
from mbs.figures.story import findings
from mbs.io import read_summary
from mbs.progress import StepProgress, format_seconds
from mbs.report import render
from mbs.runs.export import MissingProvenanceError
from mbs.runs.pipeline import steps_block
from mbs.runs.summary import SummaryError
from mbs.runs.training import TrainingSummary
from mbs.stages import calibrate, evaluate, export, synthesize, train
from mbs.stages.compose import backend_node, compose_node
from mbs.stages.config import open_run, validate_config
from mbs.training.launch import TrainError

log = logging.getLogger(__name__)

STAGE = "pipeline"
#: Step of the cost-matched direct baseline (compared in the report, not exported).
COST_MATCHED = "synthesize_direct_cost_matched"

#: Seconds each step of the main job took at its default sizes on a quiet 2-core machine: the
#: measurement of docs/performance.md ("The main job"; a fresh clone of commit 446700f on
#: 4 December 2026, nothing else running). Printed before the job starts; update both together.
QUIET_2_CORE_SECONDS: dict[str, float] = {
    "calibrate_recorded": 112.0, "calibrate_live": 90.0, "calibrate_difficulty": 46.2, "synthesize_mbs": 10.8,
    "synthesize_direct": 4.7, "synthesize_goose": 68.0, COST_MATCHED: 9.9, "export": 2.5, "train": 61.0,
    "evaluate": 39.1, "figures": 7.7,
}
#: When and where :data:`QUIET_2_CORE_SECONDS` was measured.
QUIET_2_CORE_MEASURED = "4 December 2026, docs/performance.md"


def expected_times(names: Sequence[str]) -> str:
    """What each of the steps ``names`` took on a quiet 2-core machine at the default sizes
    (:data:`QUIET_2_CORE_SECONDS`), one line per step and the total, for the job's first lines.

    A step without a measurement says so and is left out of the total.
    """
    width = max([len(n) for n in names] + [len("total")])
    lines = [(f"mbs-pipeline: {len(names)} steps. At the default sizes on a quiet 2-core machine they took "
              f"({QUIET_2_CORE_MEASURED}; a busy machine or larger sizes take longer):")]
    total = 0.0
    for name in names:
        secs = QUIET_2_CORE_SECONDS.get(name)
        total += secs or 0.0
        lines.append(f"  {name:<{width}}  {format_seconds(secs) if secs is not None else '(not measured)'}")
    lines.append(f"  {'total':<{width}}  {format_seconds(total)}")
    return "\n".join(lines)


def sub_config(cfg: DictConfig, out_dir: Path, **overrides: Any) -> DictConfig:
    """A copy of ``cfg`` for one step: ``out_dir`` set, dotted-key ``overrides`` applied.

    Values are resolved in the parent first (``${hydra:...}`` does not resolve outside the
    running app), so the step sees plain values.
    """
    sub = OmegaConf.create(OmegaConf.to_container(cfg, resolve=False))
    with open_dict(sub):
        sub.paths.root = str(cfg.paths.root)
        sub.paths.cache_dir = str(cfg.paths.cache_dir)
        sub.paths.models_dir = str(cfg.paths.models_dir)
        sub.out_dir = str(out_dir)
        for key, value in overrides.items():
            OmegaConf.update(sub, key, value, merge=False, force_add=True)
    OmegaConf.set_struct(sub, True)
    return sub


def export_runs(cfg: DictConfig, run_dirs: Sequence[str | Path] | Mapping[str, str | Path], out_dir: str | Path) -> Path:
    """Export the given run folders with the export settings of ``cfg`` into ``out_dir``.

    ``cfg`` is any composed config holding the ``export``, ``eval``, ``verifier`` and ``data``
    nodes (the pipeline's). ``export.runs`` is replaced by ``run_dirs``: a list of folders, or
    ``{source name: folder}`` (e.g. the pipeline's step names, the keys of ``export.weights``).

    Returns:
        ``out_dir`` (holding ``train.parquet`` and ``val.parquet``).
    """
    if isinstance(run_dirs, Mapping):
        runs: list[Any] = [{"name": str(k), "path": str(v)} for k, v in run_dirs.items()]
    else:
        runs = [str(p) for p in run_dirs]
    return export.run(sub_config(cfg, Path(out_dir), **{"export.runs": runs}))


def apply_overrides(cfg: DictConfig, overrides: Sequence[str]) -> None:
    """Apply ``key=value`` strings (values parsed as YAML; list indices allowed: ``a.0.b=1``).

    Raises:
        ValueError: An item without ``=``.
        omegaconf.errors.ConfigKeyError: A key that does not exist (typos fail, as on the command line).
    """
    for item in overrides:
        key, sep, value = str(item).partition("=")
        if not sep:
            raise ConfigError(f"pipeline override {item!r} is not key=value")
        if OmegaConf.select(cfg, key.strip(), default=_MISSING) is _MISSING:
            raise ConfigKeyError(f"pipeline override {item!r}: no key {key.strip()!r} in the config")
        OmegaConf.update(cfg, key.strip(), yaml.safe_load(value), merge=False)


_MISSING = object()


def plan(cfg: DictConfig) -> list[str]:
    """The names of the steps ``cfg`` runs, in order (``figures`` last)."""
    pcfg = cfg.pipeline
    names = ["calibrate_recorded"] * bool(pcfg.recorded.enabled) + ["calibrate_live"] * bool(pcfg.live.enabled)
    names += ["calibrate_difficulty"] * bool(pcfg.difficulty.enabled)
    for method in pcfg.synthesize.methods:
        if not synthesize.method_spec(method).needs_seeds or pcfg.live.enabled:
            names.append(f"synthesize_{method}")
    if pcfg.synthesize.cost_matched.enabled and "synthesize_mbs" in names:
        names.append(COST_MATCHED)
    if pcfg.export.enabled and names:
        names.append("export")
        if pcfg.train.enabled:
            names.append("train")
            if pcfg.evaluate.enabled:
                names.append("evaluate")
    return names + ["figures"]


def stage_node(stage: str, key: str, group: str | None = None) -> dict[str, Any]:
    """The ``key`` node of stage ``stage``'s config as Hydra composes it (:func:`mbs.stages.compose.compose_node`)
    with group ``key`` set to ``group`` (``None``: without the group, ``conf/<stage>.yaml``'s own node),
    unresolved: interpolations resolve in the pipeline's config."""
    return compose_node(stage, key, [f"{key}={group}" if group else f"~{key}"])


def train_step(cfg: DictConfig, export_dir: str, out_dir: Path, steps: Mapping[str, str]) -> str:
    """A brief TRL run of the calibrated policy on ``export_dir`` (``pipeline.train``)."""
    pcfg = cfg.pipeline
    sub = sub_config(cfg, out_dir, train=stage_node("train", "train", "grpo"))
    with open_dict(sub):
        sub.train.engine = "trl"
        sub.train.data_dir = export_dir
        # the configured source when that step ran; else the policy every trainable source agrees on
        sub.train.calibration = pcfg.train.calibration if pcfg.train.calibration in steps else None
    apply_overrides(sub, list(pcfg.train.overrides))
    return str(train.run(sub))


def evaluate_step(cfg: DictConfig, trained: str, out_dir: Path) -> str:
    """The trained checkpoint beside its starting model, both with ``backend=transformers`` (``pipeline.evaluate``),
    sampled as the policy trained and was calibrated (its temperature, top-p, top-k and min-p)."""
    pcfg, run = cfg.pipeline, TrainingSummary.read(trained)
    policy = run.policy
    if run.final is None or policy.temperature is None or policy.top_p is None:
        raise SummaryError(f"{trained}: the training run wrote no final checkpoint or sampling settings to evaluate")
    start, final = policy.model, run.final
    backend = backend_node("transformers")
    backend.update(top_k=int(policy.top_k or 0), min_p=float(policy.min_p or 0.0))
    name = policy.name
    models = {
        "base": {"name": f"{name} (start)", "backend": {**backend, "model": start, "label": f"{name} (start)"}},
        "trained": {"name": f"{name} (GRPO, {run.steps} steps)",
                    "backend": {**backend, "model": final, "label": f"{name} (GRPO)"}},
    }
    ev = OmegaConf.merge(OmegaConf.create(stage_node("evaluate", "eval")), cfg.eval)
    ev = OmegaConf.to_container(ev, resolve=False)
    ev.update(models=models, limit=int(pcfg.evaluate.limit), k=int(pcfg.evaluate.k), budgets=list(pcfg.evaluate.budgets),
              pass_k=[1, int(pcfg.evaluate.k)], temperature=float(policy.temperature), top_p=float(policy.top_p))
    return str(evaluate.run(sub_config(cfg, out_dir, eval=ev)))


def run(cfg: DictConfig) -> Path:
    """Run the main job into ``cfg.out_dir`` and print where the outputs are.

    A bar counts the steps (each step draws its own bar of answers graded or rollouts drawn,
    with an ETA, below it), and the end prints the time each step took; the times are in
    ``summary.json``'s ``step_seconds`` (the steps before the figures) and ``manifest.json``'s
    ``timings_s``.

    Returns:
        The pipeline's run directory.
    """
    validate_config(cfg)
    logging.getLogger("mbs").setLevel(cfg.log_level)
    out = open_run(cfg, cfg.out_dir, STAGE)
    steps: dict[str, str] = {}
    pcfg = cfg.pipeline
    if pcfg.difficulty.enabled and pcfg.difficulty.data.loader == "reasoning_gym":  # bad levels fail now, not after CHAMP

        levels_of(pcfg.difficulty.data)
    names = plan(cfg)
    print(expected_times(names), flush=True)
    progress = StepProgress(names, desc="mbs-pipeline")
    def calibrate_step(name: str, **overrides: Any) -> None:  # one calibration step into out/<name>
        with progress.step(name):
            steps[name] = str(calibrate.run(sub_config(cfg, out.path / name, **overrides)))

    if pcfg.recorded.enabled:
        calibrate_step(
            "calibrate_recorded",
            students=OmegaConf.to_container(pcfg.recorded.students, resolve=True),
            data={**OmegaConf.to_container(pcfg.recorded.data, resolve=True), "limit": pcfg.recorded.limit},
        )
    if pcfg.live.enabled:
        calibrate_step(
            "calibrate_live",
            **{"data.limit": pcfg.live.limit, "calibrate.n": pcfg.live.n, "calibrate.budgets": list(pcfg.live.budgets)},
        )

    if pcfg.difficulty.enabled:
        calibrate_step(
            "calibrate_difficulty",
            data=OmegaConf.to_container(pcfg.difficulty.data, resolve=True),
            **{
                "calibrate.n": pcfg.difficulty.n,
                "calibrate.budgets": list(pcfg.difficulty.budgets),
                "calibrate.temperature": pcfg.difficulty.temperature,
            },
        )

    for method in pcfg.synthesize.methods:
        seeds = steps.get("calibrate_live")
        if synthesize.method_spec(method).needs_seeds and seeds is None:
            log.warning("pipeline: %s needs the live calibration's hard seeds; skipped", method)
            continue
        with progress.step(f"synthesize_{method}"):
            sub = sub_config(cfg, out.path / f"synthesize_{method}", method=method, calibration_dir=seeds)
            apply_overrides(sub, pcfg.synthesize.overrides.get(method) or [])
            steps[f"synthesize_{method}"] = str(synthesize.run(sub))
    if pcfg.synthesize.cost_matched.enabled and "synthesize_mbs" in steps:
        # the direct baseline given the teacher tokens MBS spent per seed (a comparison, not exported)
        with progress.step(COST_MATCHED):
            sub = sub_config(cfg, out.path / COST_MATCHED, method="direct", calibration_dir=steps["calibrate_live"])
            apply_overrides(sub, [*(pcfg.synthesize.overrides.get("direct") or []), *pcfg.synthesize.cost_matched.overrides])
            OmegaConf.update(sub, "direct.cost_match_run", steps["synthesize_mbs"], merge=False)
            steps[COST_MATCHED] = str(synthesize.run(sub))
    if pcfg.export.enabled and steps:
        with progress.step("export"):
            exported = {k: v for k, v in steps.items() if k != COST_MATCHED}
            steps["export"] = str(export_runs(cfg, exported, out.path / "export"))
    skipped: dict[str, str] = {}
    if pcfg.export.enabled and pcfg.train.enabled and "export" in steps:
        with progress.step("train"):
            try:
                steps["train"] = train_step(cfg, steps["export"], out.path / "train", steps)
            except (TrainError, MissingProvenanceError) as err:  # nothing of the calibrated policy to train on
                log.warning("pipeline: training skipped: %s", err)
                skipped["train"] = str(err)
        if pcfg.evaluate.enabled and "train" in steps:
            with progress.step("evaluate"):
                steps["evaluate"] = evaluate_step(cfg, steps["train"], out.path / "evaluate")
    summary: dict[str, Any] = {"steps": steps_block(out.path, steps)}
    for name, path in steps.items():
        s = read_summary(path)
        keep = ("trap_forecast", "results", "bands", "intervals", "hard_seeds", "problems", "target_policy", "rows", "removed", "train_rows", "val_rows",
                "difficulty_moves", "yield", "yield_ci", "effective_share", "effective_share_ci")
        summary[name] = {k: s[k] for k in keep if k in s}
    if skipped:
        summary["skipped"] = skipped
    summary["step_seconds"] = {name: round(sec, 1) for name, sec in progress.seconds.items()}
    out.write_summary(summary)
    with progress.step("figures"):
        report = render(out.path, out.path, formats=("png", "pdf"), width="single")
    progress.close()
    out.timings.update(progress.seconds)
    out.write_manifest({"steps": len(steps), "figures": len(report["figures"])}, report=report.get("report"))
    lines = [f"mbs-pipeline finished in {format_seconds(sum(progress.seconds.values()))}: outputs in {out.path}"]
    story = [f for f in findings([(name, read_summary(path)) for name, path in steps.items()]) if f.figure == "trap_bands"]
    if story:  # the headline: the trap of the first live study (N samples of a policy at a budget L)
        lines.append(f"headline ({story[0].step}): {story[0].title}; {story[0].text.split(': solved_all')[0]}")
    for name, path in steps.items():
        what = "train.parquet, val.parquet, summary.json" if name == "export" else "summary.json, figures/"
        lines.append(f"  {name:<20} {path}  ({what})")
    if report.get("report"):
        lines.append(f"  {'report':<20} {report['report']}")
    lines += ["time per step:", progress.table()]
    moves = [m for name in steps for m in summary[name].get("difficulty_moves", [])]
    if moves:
        lines += ["what moved where (difficulty x budget):"] + [f"  {m}" for m in moves]
    print("\n".join(lines), flush=True)
    return out.path
