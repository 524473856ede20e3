"""CHAMP's recorded model answers as rollouts: grading them, and what the grading found.

A recorded policy (``students[i].source: recorded``) cannot be sampled: its no-hint answers
recorded by CHAMP are its rollouts (budget ``None``), and its answers under hint and
partial-solution settings are the offline analogue of the effectivity test.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

from tqdm.auto import tqdm

from mbs.calibration.sampling import Policy, RolloutWriter
from mbs.data.champ import RECORDED_MODELS, recorded_answers
from mbs.errors import ConfigError
from mbs.records import Problem, Rollout, reason_kind
from mbs.verify.sources import verifier_for


def calibrate_recorded(
    policy: Policy, problems: Sequence[Problem], writer: RolloutWriter, cond_writer: RolloutWriter, verifier_path: str | None = None
) -> None:
    """Grade a recorded CHAMP model's answers: no-hint settings are its rollouts (budget ``None``).

    Answers recorded under hint or partial-solution settings are graded too and written by
    ``cond_writer`` (their ``setting`` names the condition): the offline analogue of the
    effectivity test. Answers already graded (in either writer's ``done``) are skipped.

    Args:
        verifier_path: ``verifier.path`` (a verifier named by import path; ``None``: by answer type).

    Raises:
        ConfigError: The policy names no recorded model, or the problems are not CHAMP problems
            (recorded answers exist only there).
    """
    model = policy.model
    if model is None:
        raise ConfigError(f"students: recorded policy {policy.name} needs a model, one of {list(RECORDED_MODELS)}")
    todo: list[tuple[Rollout, Problem, bool]] = []
    for p in problems:
        if not p.id.startswith("champ/"):
            raise ConfigError(f"students: recorded policy {policy.name} needs data=champ, got problem {p.id}")
        answers = sorted(recorded_answers(p.id.split("/", 1)[1], model), key=lambda a: a.setting)
        samples = [a for a in answers if a.kind == "sample"]
        others = [a for a in answers if a.kind != "sample"]
        for i, a in enumerate(samples + others):
            is_sample = a.kind == "sample"
            r = Rollout(
                problem_id=p.id,
                policy=policy.name,
                budget=None,
                sample_index=i,
                text=a.final or a.solution,
                finish_reason=a.finish_reason,
                setting=a.setting,
            )
            if r.key not in (writer.done if is_sample else cond_writer.done):
                todo.append((r, p, is_sample))
    # the bar counts answers graded (not sent): submitting takes a second, grading takes minutes
    with tqdm(total=len(todo), desc=f"grade {policy.name}", unit="answer", dynamic_ncols=True) as bar:
        writer.progress = cond_writer.progress = bar.update
        try:
            for r, p, is_sample in todo:
                (writer if is_sample else cond_writer).add(r, p.ground_truth or "", verifier_for(p, verifier_path))
            writer.flush(wait=True)
            cond_writer.flush(wait=True)
        finally:
            writer.progress = cond_writer.progress = None


def recorded_report(problems: Sequence[Problem], rollouts: Sequence[Rollout], conditioned: Sequence[Rollout]) -> dict[str, Any]:
    """How recorded answers were graded, grading agreement with CHAMP's first-wrong-step
    annotations (a human spot-check: "no mistake" should grade correct), and per-policy
    accuracy without and with hints / partial solutions (the offline effectivity analogue).
    """
    fws: dict[tuple[str, str, str | None], bool] = {}  # keyed as rollouts read it (a rollout's setting may be None)
    for p in problems:
        if not p.id.startswith("champ/"):
            continue
        pid = p.id.split("/", 1)[1]
        for model in {r.policy for r in rollouts if r.budget is None}:
            for a in recorded_answers(pid, model) if model in RECORDED_MODELS else []:
                if a.fws_correct is not None:
                    fws[(p.id, model, a.setting)] = a.fws_correct
    every = [r for r in rollouts if r.budget is None] + list(conditioned)
    how = Counter(reason_kind(r.reason) for r in every)
    agree = [(r.reward == 1.0) == fws[(r.problem_id, r.policy, r.setting)] for r in every if (r.problem_id, r.policy, r.setting) in fws]
    # "no mistake" annotations should grade correct; a marked wrong step usually means a wrong answer
    no_mistake = [r.reward == 1.0 for r in every if fws.get((r.problem_id, r.policy, r.setting)) is True]
    acc: dict[str, dict[str, Any]] = {}
    per_problem: dict[str, dict[str, dict[str, list[float]]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    for r in every:
        kind = "sample" if r.setting and not (r.setting.endswith("w/ H") or r.setting.endswith("Soln")) else (
            "hint" if r.setting and r.setting.endswith("w/ H") else "partial_solution"
        )
        per_problem[r.policy][r.problem_id][kind].append(1.0 if r.reward == 1.0 else 0.0)
    for policy, probs in sorted(per_problem.items()):
        row: dict[str, Any] = {}
        for kind in ("sample", "hint", "partial_solution"):
            # by problem id, with fsum: the same number whatever order the shards came in
            vals = [math.fsum(probs[pid][kind]) / len(probs[pid][kind]) for pid in sorted(probs) if probs[pid][kind]]
            row[f"acc_{kind}"] = math.fsum(vals) / len(vals) if vals else None
        both = [(sum(v["sample"]) / len(v["sample"]), sum(v["hint"]) / len(v["hint"])) for v in probs.values() if v["sample"] and v["hint"]]
        row["hint_raises_acc_share"] = sum(1 for a, b in both if b > a) / len(both) if both else None
        row["hint_lowers_acc_share"] = sum(1 for a, b in both if b < a) / len(both) if both else None
        acc[policy] = row
    return {
        "answers": len(every),
        "graded": sum(1 for r in every if r.reward is not None),
        "ungraded": sum(1 for r in every if r.reward is None),
        "by_extraction": dict(sorted(how.items())),
        "fws_spot_check": {
            "annotated": len(agree),
            "agreement": (sum(agree) / len(agree)) if agree else None,
            "no_mistake_annotated": len(no_mistake),
            "no_mistake_graded_correct": (sum(no_mistake) / len(no_mistake)) if no_mistake else None,
        },
        "accuracy": acc,
    }
