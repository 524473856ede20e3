"""The thesis on a laptop: calibrated data against trapped and uncalibrated data, trained and measured.

Run: ``mbs-thesis experiment=thesis_quick hydra.run.dir=runs/thesis_quick`` (the CI size, about 3
minutes on 2 cores) or ``mbs-thesis experiment=thesis hydra.run.dir=runs/thesis`` (the full size;
``experiments/thesis.sh``). Rerunning with the same ``hydra.run.dir`` resumes.

Steps, each in a sub-folder of the run directory (issue 28; the claim of both source papers: a
problem teaches a GRPO policy only when its rollouts disagree):

1. ``calibrate/``: the Reasoning Gym corpus (``thesis.data``) calibrated with the embedded policy at
   N = ``thesis.n`` (the GRPO group size) and budget L = ``thesis.budget`` (``mbs-calibrate``);
2. ``export/``: every calibrated problem as verl parquet with the calibrated policy's provenance
   (``mbs-export``, ``export.select=all``: dedup removes repeated prompts, so no held-out prompt is
   also a training prompt);
3. ``sets/``: a held-out set (``thesis.heldout`` problems drawn from the export; pool problems that
   are a held-out one with its operands commuted are dropped) and, for each training seed, three
   training sets of ``thesis.set_size`` problems drawn from the rest (``sets/seed<s>/<set>/``,
   :func:`mbs.thesis.sets.build_sets`): goldilocks, trapped, uncalibrated; each folder is an export (``train.parquet`` and the export's
   ``summary.json``), so ``mbs-train`` trains exactly the calibrated policy;
4. ``runs/<set>/seed<s>/``: TRL's GRPO (``mbs-train train.engine=trl``) with the same steps,
   learning rate and seed for every set, trained ``thesis.eval_every`` steps at a time; after each
   segment the policy is evaluated on the held-out set (avg@k at L, the same verifier and
   sampling, ``backend=transformers``); at the end also at ``thesis.extra_budgets``, and the set is
   re-calibrated with the trained policy (N rollouts at L). The base model's evaluation (step 0)
   is shared by every set of a seed;
5. ``summary.json`` (accuracies with intervals, paired tests, zero-std shares against the
   calibration's forecast, band migration), ``figures/``, ``tables/``, ``report.html`` and
   ``manifest.json`` last.

Evaluation and re-calibration rollouts go to two append-only shards of the run directory
(``eval_rollouts``, ``recal_rollouts``); a rerun draws only what is missing and trains nothing a
finished checkpoint already holds.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from omegaconf import DictConfig, OmegaConf, open_dict

from mbs.calibration.sampling import Group, RolloutWriter
from mbs.data import load_problems
from mbs.errors import UserError
from mbs.export.verl_schema import write_parquet
from mbs.figures.story import thesis_findings
from mbs.io import read_records, read_summary, write_json_atomic
from mbs.llm import close_all
from mbs.prompts import turns
from mbs.records import Calibration, Problem, Rollout
from mbs.report import render
from mbs.runs.calibration import CalibrationSummary
from mbs.runs.training import TrainingSummary
from mbs.stages import calibrate, train
from mbs.stages.compose import backend_node
from mbs.stages.config import open_run, validate_config
from mbs.stages.pipeline import export_runs, stage_node, sub_config
from mbs.thesis.sampling import Sampler, release
from mbs.thesis.screen import screen_tasks, with_task
from mbs.thesis.sets import ARM_SET, ARMS, build_sets, commuted_key, split_heldout
from mbs.thesis.summary import summarize
from mbs.training.launch import TrainError
from mbs.training.policy import resolve_policy
from mbs.training.settings import TrainSettings
from mbs.validate import ConfigError
from mbs.verify.pool import GradingPool

log = logging.getLogger(__name__)

# torch's spinning OpenMP threads slow decoding and training 5-30x on 2 shared cores (see
# mbs.llm.transformers_backend); read once when torch loads, so set before TRL or the backend import it
os.environ.setdefault("OMP_WAIT_POLICY", "passive")

STAGE = "thesis"


def schedule(steps: int, every: int) -> list[int]:
    """The evaluation steps: 0, every, 2 * every, ..., and ``steps`` itself.

    Raises:
        ConfigError: ``steps`` or ``every`` below 1.
    """
    if steps < 1 or every < 1:
        raise ConfigError(f"thesis.steps={steps} and thesis.eval_every={every} must be >= 1")
    return sorted({0, *range(every, steps + 1, every), steps})


def _screen_data(cfg: DictConfig) -> dict[str, Any] | None:
    """The screening corpus: ``thesis.screen.size`` problems of every candidate task (``None``: no candidate)."""
    t = cfg.thesis
    candidates = list((t.get("screen") or {}).get("candidates") or [])
    if not candidates:
        return None
    data: dict[str, Any] = dict(OmegaConf.to_container(t.data, resolve=True))  # type: ignore[arg-type]
    data.update(tasks=[str(c.task) for c in candidates], size=int(t.screen.size), params={}, limit=None,
                levels={str(c.task): OmegaConf.to_container(c.levels, resolve=True) for c in candidates if c.get("levels")})
    return data


def _screen(cfg: DictConfig, root: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """Calibrate the candidate tasks (``screen/``) and choose the second task (:func:`mbs.thesis.screen.screen_tasks`).

    Returns:
        ``(screen block of summary.json, the corpus node: thesis.data with the chosen task added)``.
    """
    t = cfg.thesis
    data: dict[str, Any] = dict(OmegaConf.to_container(t.data, resolve=True))  # type: ignore[arg-type]
    screen_data = _screen_data(cfg)
    if screen_data is None:
        return {"chosen": None, "candidates": {}}, data
    cal_dir = _calibrate(cfg, root / "screen", screen_data)
    close_all()
    block = screen_tasks(read_records(cal_dir, "rollouts", Rollout), screen_data["tasks"], int(t.n))
    if block["chosen"] is None:
        log.warning("thesis: no screening candidate has all three bands under the strict format at L=%s: %s; the corpus "
                    "stays thesis.data", t.budget, {k: v["bands"] for k, v in block["candidates"].items()})
        return block, data
    chosen = next(c for c in t.screen.candidates if str(c.task) == block["chosen"])
    levels = OmegaConf.to_container(chosen.levels, resolve=True) if chosen.get("levels") else None
    return block, with_task(data, block["chosen"], levels)  # type: ignore[arg-type]


def _calibrate(cfg: DictConfig, out_dir: Path, data: dict[str, Any]) -> Path:
    """``mbs-calibrate`` of the corpus node ``data`` at the thesis's N, L and sampling (no early stopping)."""
    t = cfg.thesis
    sub = sub_config(cfg, out_dir, data=data, **{
        "calibrate.n": int(t.n), "calibrate.budgets": [int(t.budget)], "calibrate.temperature": float(t.temperature),
        "calibrate.top_p": float(t.top_p), "calibrate.early_stop.enabled": False,
    })
    return calibrate.run(sub)


def _train_cfg(cfg: DictConfig, data_dir: Path, out_dir: Path, seed: int, steps: int, dynamic: bool = False) -> DictConfig:
    """The ``mbs-train`` config of one set and seed, trained up to ``steps`` (``dynamic``: with dynamic
    sampling, at most ``thesis.dynamic_max_rounds`` generation rounds a step)."""
    t = cfg.thesis
    sub = sub_config(cfg, out_dir, train=stage_node("train", "train", "grpo"))
    with open_dict(sub):
        sub.seed = int(seed)
        sub.train.engine, sub.train.data_dir, sub.train.calibration = "trl", str(data_dir), None
        trl = sub.train.trl
        trl.max_steps, trl.prompts_per_step, trl.gradient_accumulation_steps = int(steps), int(t.prompts_per_step), 1
        trl.learning_rate, trl.lr_scheduler_type = float(t.learning_rate), "constant"
        trl.beta, trl.loss_type, trl.seed = float(t.beta), str(t.loss_type), int(seed)
        trl.save_steps, trl.save_total_limit, trl.resume, trl.progress = int(t.eval_every), None, True, False
        trl.dynamic_sampling.enabled, trl.dynamic_sampling.max_rounds = bool(dynamic), int(t.dynamic_max_rounds)
    return sub


def _backend(cfg: DictConfig, model: str, label: str, top_k: int | None, min_p: float | None) -> dict[str, Any]:
    """The ``transformers`` backend node of a checkpoint, sampling as the calibrated policy."""
    node = backend_node("transformers")
    node.update(model=str(model), cache_dir=str(cfg.paths.models_dir), label=label, batch_size=int(cfg.thesis.batch_size),
                top_k=int(top_k or 0), min_p=float(min_p or 0.0))
    return node


def _write_sets(export_dir: Path, root: Path, sets: dict[int, dict[str, list[str]]],
                heldout: list[str]) -> dict[int, dict[str, Path]]:
    """``sets/seed<s>/<set>/train.parquet`` (the export's rows of the set each training seed drew) and
    the export's ``summary.json`` (its ``policy`` block: the provenance ``mbs-train`` trains from);
    ``sets/heldout.json``.

    Writing the run's set folders is this stage's output (and :mod:`mbs.thesis.sets`, below
    :mod:`mbs.export` in the layers, cannot write verl parquet), so it stays here."""
    rows = {r["extra_info"]["id"]: r for r in pq.read_table(export_dir / "train.parquet").to_pylist()}
    summary = read_summary(export_dir)
    out: dict[int, dict[str, Path]] = {}
    for seed, by_name in sets.items():
        for name, ids in by_name.items():
            folder = root / "sets" / f"seed{seed}" / name
            write_parquet([rows[i] for i in ids], folder / "train.parquet")
            write_parquet([], folder / "val.parquet")  # the held-out set is the thesis's own; mbs-train expects the file
            write_json_atomic(folder / "summary.json", {**summary, "thesis_set": name, "thesis_seed": seed, "set_rows": len(ids),
                                                        "ids": ids})
            out.setdefault(seed, {})[name] = folder
    write_json_atomic(root / "sets" / "heldout.json", {"ids": heldout})
    return out


#: A ``data.*`` key named in a data loader's message (``data.tasks[0]``): the thesis's corpus is ``thesis.data``.
_DATA_KEY = re.compile(r"(?<![\w./])data\.")


def tidy(run_dir: Path, keep_checkpoints: bool, keep_final: bool) -> None:
    """Remove what a complete (arm, seed) run no longer needs once its evaluations are recorded:
    TRL's ``checkpoints/`` (optimizer state) unless ``keep_checkpoints``, and the trained model
    (``final/``) unless ``keep_final``. Its summary, metrics and completions stay."""
    if not keep_checkpoints:
        shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)
    if not keep_final:
        shutil.rmtree(run_dir / "final", ignore_errors=True)


def use_templates(cfg: DictConfig) -> None:
    """Set ``thesis.templates`` over ``answer_templates`` in ``cfg``: the one prompt of every step of
    the thesis (screening, calibration, export, training, evaluation interpolate
    ``answer_templates``), recorded in the run's config and sampling check like any override.

    Raises:
        ConfigError: ``thesis.templates`` is not a mapping answer type -> template name, or names
            a template that does not exist or is malformed.
    """
    over = cfg.thesis.get("templates")
    if over is None:
        return
    if not isinstance(over, DictConfig) or not all(isinstance(v, str) for v in over.values()):
        raise ConfigError(f"thesis.templates={over!r}: expected a mapping answer type -> prompt template name")
    chosen = {str(k): str(v) for k, v in over.items()}
    for answer_type, name in chosen.items():
        try:
            turns(name)
        except (FileNotFoundError, ValueError) as err:
            raise ConfigError(f"thesis.templates.{answer_type}: {err}") from None
    with open_dict(cfg):
        for answer_type, name in chosen.items():
            cfg.answer_templates[answer_type] = name


def check_config(cfg: DictConfig) -> list[Problem]:
    """Check the whole thesis config before anything is written, every problem at once and in the
    names the user sets (``thesis.n=0``, not the ``calibrate.n`` it becomes): the ranges of
    :data:`mbs.validate.RULES` (``thesis.*``, the export and calibration keys), the corpus
    ``thesis.data`` (loaded: an unknown task or parameter is named as ``thesis.data.tasks[0]``),
    and the sizes against the corpus: ``thesis.heldout`` and ``thesis.set_size`` problems must fit
    in it, and ``thesis.prompts_per_step`` in a training set.

    Returns:
        The corpus's problems (``thesis.data``).

    Raises:
        mbs.validate.ConfigError: Every problem found, one line each.
    """
    found: list[str] = []
    try:
        validate_config(cfg)
    except ConfigError as err:
        found += err.problems
    t = cfg.thesis
    corpus: list[Problem] | None = None
    try:
        corpus = load_problems(OmegaConf.create(OmegaConf.to_container(t.data, resolve=True)))[0]
    except UserError as err:
        found.append(_DATA_KEY.sub("thesis.data.", str(err)))
    try:
        screen_data = _screen_data(cfg)
        if screen_data is not None:
            load_problems(OmegaConf.create(screen_data))
    except UserError as err:
        found.append(_DATA_KEY.sub("thesis.screen.", str(err)).replace("thesis.screen.tasks", "thesis.screen.candidates"))
    except (AttributeError, KeyError, TypeError, ValueError) as err:  # a candidate without task or levels
        found.append(f"thesis.screen.candidates: each candidate is {{task: <Reasoning Gym task>, levels: {{name: params}}}} ({err})")
    heldout, size, per_step = (_count(t.get(k)) for k in ("heldout", "set_size", "prompts_per_step"))
    if corpus is not None and heldout is not None:
        n = len(corpus)
        where = f"thesis.data gives {n} problem(s) (thesis.data.size={t.data.get('size')} per task, thesis.data.tasks={list(t.data.get('tasks') or [])})"
        if heldout >= n:
            found.append(f"thesis.heldout={heldout}: {where}; hold out 1 to {n - 1}, or grow thesis.data.size")
        elif size is not None and heldout + size > n:
            found.append(f"thesis.set_size={size} and thesis.heldout={heldout}: a training set is drawn from the problems not "
                         f"held out, {heldout} + {size} > {n}: {where}; grow thesis.data.size or lower them")
    if size is not None and per_step is not None and per_step > size:
        found.append(f"thesis.prompts_per_step={per_step}: more than the thesis.set_size={size} problems of a training set")
    primary = list(t.get("primary") or [])
    if len(primary) != 2 or primary[0] == primary[1]:
        found.append(f"thesis.primary={primary}: name two different arms, A and B of the contrast A - B")
    if found:
        raise ConfigError(list(dict.fromkeys(found)))
    assert corpus is not None
    return corpus


def _count(value: Any) -> int | None:
    """``value`` as a count when it is an integer of at least 1 (else its rule reports it)."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and float(value).is_integer() and value >= 1
    return int(value) if ok else None


def run(cfg: DictConfig) -> Path:
    """Run the thesis experiment into ``cfg.out_dir`` (see the module docstring).

    Returns:
        The run directory.

    The whole config is checked first (:func:`check_config`), before the run directory is opened.

    Raises:
        ConfigError: Bad ``thesis.*`` values (each named, all at once, before anything is
            written), or too few problems of a band for a set (known after the calibration).
        mbs.training.launch.TrainError: A training run failed.
        mbs.errors.MissingExtraError: The ``trl`` extra is not installed.
    """
    use_templates(cfg)
    corpus_problems = check_config(cfg)
    logging.getLogger("mbs").setLevel(cfg.log_level)
    t = cfg.thesis
    steps = schedule(int(t.steps), int(t.eval_every))
    seeds = [int(s) for s in t.seeds]
    L, N, k = int(t.budget), int(t.n), int(t.eval_k)
    budgets = sorted({L, *(int(b) for b in t.extra_budgets)})
    out = open_run(cfg, cfg.out_dir, STAGE)
    root = out.path
    t0 = time.perf_counter()
    screen, data = _screen(cfg, root)
    if screen["chosen"] is not None:  # the corpus grows by the chosen task
        corpus_problems = load_problems(OmegaConf.create(data))[0]
    cal_dir = _calibrate(cfg, root / "calibrate", data)
    close_all()
    out.timings["calibrate"] = time.perf_counter() - t0
    export_dir = export_runs(cfg, {"corpus": str(cal_dir)}, root / "export")
    policy_name = CalibrationSummary.read(cal_dir).target_policy
    exported = {r["extra_info"]["id"] for r in pq.read_table(export_dir / "train.parquet", columns=["extra_info"]).to_pylist()}
    corpus = [c for c in read_records(cal_dir, "calibrations", Calibration)
              if c.policy == policy_name and c.budget == L and c.problem_id in exported]
    problems = {p.id: p for p in corpus_problems}
    keys = {c.problem_id: commuted_key(problems[c.problem_id].prompt) for c in corpus}
    heldout, pool = split_heldout(corpus, int(t.heldout), int(t.split_seed), keys)
    # each training seed draws its own sets from the pool (the held-out set is fixed): the seed-level
    # intervals then cover which problems a set happens to hold, not only the training noise
    sets = {seed: build_sets(pool, corpus, int(t.set_size), [int(t.split_seed), seed]) for seed in seeds}
    set_dirs = _write_sets(export_dir, root, sets, heldout)
    templates, vcfg = cfg.calibrate.templates, cfg.verifier
    eval_groups = {b: [Group.of(problems[i], b, templates, vcfg) for i in heldout] for b in budgets}
    recal_groups = {seed: {name: [Group.of(problems[i], L, templates, vcfg) for i in ids] for name, ids in by_name.items()}
                    for seed, by_name in sets.items()}
    first = _train_cfg(cfg, set_dirs[seeds[0]]["goldilocks"], root / "runs" / "goldilocks" / f"seed{seeds[0]}", seeds[0], 1)
    policy = resolve_policy(TrainSettings.from_cfg(first.train, seed=first.seed, cache_dir=cfg.paths.models_dir))
    if policy.group_size != N or policy.max_completion_length != L:
        raise ConfigError(f"the export's calibrated policy has N={policy.group_size}, L={policy.max_completion_length}; "
                          f"the thesis asks N={N}, L={L}")
    base = policy.model  # the converted checkpoint TRL starts from: the base model every evaluation compares to
    t1 = time.perf_counter()
    trained: dict[str, Any] = {}
    with GradingPool.from_config(cfg.verifier) as pool_, out.shard("eval_rollouts", Rollout) as es, \
            out.shard("recal_rollouts", Rollout) as rs:
        cache, temperature, top_p = str(cfg.paths.cache_dir), float(t.temperature), float(t.top_p)
        ev = Sampler(RolloutWriter(pool_, es, {r.key: r for r in es.read()}), cache, temperature, top_p)
        rc = Sampler(RolloutWriter(pool_, rs, {r.key: r for r in rs.read()}), cache, temperature, top_p)
        for seed in seeds:  # seed-major: a run stopped early has every set for its first seeds
            base_be = _backend(cfg, base, "base", policy.top_k, policy.min_p)
            for b in budgets:
                ev(f"base/seed{seed}", base_be, eval_groups[b], k, seed)
            if bool(t.recalibrate):  # the sets' bands under the evaluation backend before training (the control)
                rc(f"base/seed{seed}", base_be, sorted({g.id: g for gs in recal_groups[seed].values() for g in gs}.values(),
                                                        key=lambda g: g.id), N, seed)
            for name in ARMS:
                run_dir = root / "runs" / name / f"seed{seed}"
                tag = f"{name}/seed{seed}"
                finished = (ev.done(f"{tag}/step{steps[-1]}", eval_groups[L], k)
                            and all(ev.done(f"{tag}/final", eval_groups[b], k) for b in budgets)
                            and (not t.recalibrate or rc.done(f"{tag}/final", recal_groups[seed][ARM_SET[name]], N)))
                if not finished:
                    # one training run to the last step; TRL's checkpoint at each evaluation step (kept until
                    # the run is complete) is the policy evaluated there, the final model the last one's
                    log.info("thesis: training %s to step %d", tag, steps[-1])
                    release()  # the evaluation's checkpoint leaves memory before training
                    trained_run = TrainingSummary.read(train.run(_train_cfg(cfg, set_dirs[seed][ARM_SET[name]], run_dir, seed,
                                                                            steps[-1], dynamic=name == "dynamic")))
                    close_all()
                    if trained_run.final is None:
                        raise TrainError(f"{run_dir}: the training run wrote no final model (summary.json result.final)")
                    final = trained_run.final
                    for s in steps[1:]:
                        model = final if s == steps[-1] else str(run_dir / "checkpoints" / f"checkpoint-{s}")
                        ev(f"{tag}/step{s}", _backend(cfg, model, f"{tag}/step{s}", policy.top_k, policy.min_p), eval_groups[L], k, seed)
                    be = _backend(cfg, final, f"{tag}/step{steps[-1]}", policy.top_k, policy.min_p)
                    for b in budgets:
                        ev(f"{tag}/final", be, eval_groups[b], k, seed)
                    if bool(t.recalibrate):
                        rc(f"{tag}/final", be, recal_groups[seed][ARM_SET[name]], N, seed)
                tidy(run_dir, keep_checkpoints=bool(t.keep_checkpoints), keep_final=bool(t.keep_final))
                trained[tag] = str(run_dir.relative_to(root))
        release()
        evals, recals = list(ev.writer.done.values()), list(rc.writer.done.values())
    out.timings["train_and_evaluate"] = time.perf_counter() - t1
    # a level is named by its task too when the corpus has two (chain_sum and products both have d1t2)
    key = "difficulty" if len({(problems[i].metadata or {}).get("task") for i in heldout}) > 1 else "level"
    levels = {i: str((problems[i].metadata or {}).get(key)) for i in heldout}
    summary = summarize(cfg.thesis, root, corpus, heldout, sets, steps, seeds, budgets, evals, recals, policy, trained, levels)
    # pool problems that are a held-out problem with its operands commuted, left out of every set
    summary["heldout"]["commuted_dropped_from_pool"] = len(corpus) - len(heldout) - len(pool)
    summary["screen"] = screen
    out.write_summary(summary)
    report = render(root, root, formats=tuple(t.formats), width=str(t.width))
    out.write_manifest({"corpus": len(corpus), "heldout": len(heldout), "set_size": int(t.set_size), "seeds": len(seeds),
                        "trainings": len(trained), "eval_rollouts": len(evals), "recal_rollouts": len(recals),
                        "figures": len(report["figures"])}, report=report.get("report"))
    for finding in thesis_findings(STAGE, summary):  # the pre-declared result first, as the report's summary opens
        print(f"mbs-thesis: {finding.title}", flush=True)
    print(f"mbs-thesis: outputs in {root} (summary.json, figures/, tables/, report.html)", flush=True)
    return root
