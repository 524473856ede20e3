"""Optional judge pool: LLM judges check synthetic problems for well-posedness and answer correctness.

``mbs.judges.pool`` lists judges in the teacher-pool format (``name``, ``source: live``,
``backend``, ``max_tokens``, ``temperature``); an empty pool judges nothing. Each judge sees a
qualified problem and its stated answer (``mbs_judge_v1``) and ends with two verdicts,
``<well_posed>yes|no</well_posed>`` and ``<answer_correct>yes|no</answer_correct>``. A judge
*accepts* a problem when both are yes; an unparseable verdict counts as no verdict.

Reported (seed paper, math: 8.0% unanimously rejected, 89.3% verified by at least one judge):
the share of judged problems every judge with a verdict rejected, and the share at least one
judge accepted. With ``mbs.judges.filter=true`` unanimously rejected problems are dropped.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mbs.prompts import user_messages
from mbs.records import Candidate
from mbs.synth.engine import Gather, Tally, Task, generate
from mbs.synth.problems import clip
from mbs.synth.structured import StructureError, parse_verdict
from mbs.synth.teacher import Teacher


def judge_variants(variants: Sequence[Candidate], judges: Sequence[Teacher], template: str, max_chars: int, tally: Tally) -> Task:
    """Ask every judge about every variant (a coroutine; one batched round).

    Sets ``variant["judges"] = {judge: {"well_posed", "answer_correct", "accept"} or {"error"}}``
    and ``variant["judge_verdict"]`` = ``accepted`` (some judge accepts), ``rejected`` (every
    judge with a verdict rejects) or ``none`` (no verdict).
    """
    if not judges or not variants:
        return
    tasks = []
    for j in judges:
        reqs = [j.request(user_messages(template, problem=clip(v["problem"], max_chars), answer=v["answer"])) for v in variants]
        tasks.append(generate(j, reqs, tally))
    per_judge = yield Gather(tasks)
    for vi, v in enumerate(variants):
        verdicts: dict[str, Any] = {}
        for j, comps in zip(judges, per_judge):
            try:
                d = parse_verdict(comps[vi][0].text)
                verdicts[j.name] = {**d, "accept": d["well_posed"] and d["answer_correct"]}
            except StructureError as err:
                verdicts[j.name] = {"error": comps[vi][0].no_answer_reason or str(err)}
        v["judges"] = verdicts
        with_verdict = [d for d in verdicts.values() if "accept" in d]
        if any(d["accept"] for d in with_verdict):
            v["judge_verdict"] = "accepted"
        elif with_verdict:
            v["judge_verdict"] = "rejected"
        else:
            v["judge_verdict"] = "none"


def judge_summary(variants: Sequence[Candidate], judges: Sequence[Teacher]) -> dict[str, Any] | None:
    """Shares over the judged variants: unanimously rejected, verified by at least one judge."""
    if not judges:
        return None
    judged = [v for v in variants if "judge_verdict" in v]
    n = len(judged)
    rej = sum(1 for v in judged if v["judge_verdict"] == "rejected")
    acc = sum(1 for v in judged if v["judge_verdict"] == "accepted")
    return {
        "judges": [j.name for j in judges],
        "judged": n,
        "unanimously_rejected": rej,
        "verified_by_at_least_one": acc,
        "no_verdict": n - rej - acc,
        "unanimously_rejected_share": rej / n if n else None,
        "verified_by_at_least_one_share": acc / n if n else None,
    }
