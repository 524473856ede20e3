"""Golden Goose with the real embedded SmolLM2-135M model: the teacher-free CHAMP items filtered by
the model in-process, and the LLM-teacher path in-process and behind llama.cpp's OpenAI server.

Kept small (one CHAMP item, two rollouts of 8 tokens; one teacher call of 32 tokens): the
135M model answers near chance and rarely writes valid JSON, so these check the real plumbing
(prompts, budgets, grading, rejection bookkeeping); the scripted tests check the semantics.
"""

from __future__ import annotations

import pytest

from mbs.io import read_manifest, read_records, read_summary
from mbs.llm import close_all
from mbs.records import Problem, Rollout
from mbs.stages.synthesize import run
from mbs.synth.goose.build import REASONS

pytestmark = pytest.mark.slow

MODEL = "smollm2-135m-instruct"
SMALL = ["method=goose", "synth.figures=false", "verifier.workers=1", "goose.champ.concepts=false"]


def test_teacher_free_champ_filtered_by_the_embedded_model(make_cfg):
    args = SMALL + [
        "goose.source=champ", "goose.teacher_free=true", "data.limit=1", "goose.filter.n=2", "goose.filter.budget=8",
        "synth.early_stop=false",
    ]
    out = run(make_cfg("synthesize", args))
    s = read_summary(out)
    assert s["items_built"] == 1 and s["rejected"] == {} and s["options"] == 9
    rollouts = read_records(out, "rollouts", Rollout)
    assert len(rollouts) == 2 and {r.policy for r in rollouts} == {MODEL}
    assert all(r.finish_reason in ("stop", "length") and 0 < r.completion_tokens <= 8 and r.prompt_tokens > 300 for r in rollouts)
    assert all(r.reward in (0.0, 1.0) for r in rollouts)
    assert s["backends"][MODEL]["samples"] == 2
    assert s["student"]["accuracy"] == sum(r.reward for r in rollouts) / 2
    assert s["effective_share"] == len(read_records(out, "problems", Problem))
    close_all()
    again = run(make_cfg("synthesize", args, out="again"))
    assert read_manifest(again)["backends"][MODEL]["samples"] == 0  # the cache serves every rollout


def _teacher_run(make_cfg, out, *backend_args):
    args = SMALL + [
        "goose.source=champ", "data.limit=1", "goose.filter.enabled=false", "teacher.pool.0.max_tokens=32",
        *backend_args,
    ]
    rd = run(make_cfg("synthesize", args, out=out))
    s = read_summary(rd)
    assert s["passages"] == 1 and s["items_built"] + s["rejected_total"] == 1
    assert set(s["rejected"]) <= set(REASONS)
    (teacher,) = [k for k in s["backends"] if k.startswith("teacher:")]
    assert s["backends"][teacher]["samples"] == 1 and s["backends"][teacher]["completion_tokens"] > 0
    return s, teacher


def test_teacher_path_with_the_embedded_model(make_cfg):
    _, teacher = _teacher_run(make_cfg, "local")
    assert teacher == f"teacher:{MODEL}"


def test_teacher_path_with_an_openai_endpoint(make_cfg, llama_server):
    _, teacher = _teacher_run(
        make_cfg, "served", "backend=openai", f"backend.base_url={llama_server.base_url}", "backend.model=smollm2",
        "backend.max_retries=1",
    )
    assert teacher == "teacher:smollm2"
