"""A thinking teacher and thinking judges build the same MagicBeanStalk tree as without thinking.

The scripted teacher of tests/support/scripted_teacher.py is served over HTTP on 127.0.0.1
(tests/support/thinking.py) and reached through the real ``openai`` backend. With thinking on,
every reply starts with a long ``<think>`` draft that mentions every output tag (``<problem>``,
``<subproblem>``, ``<answer>``, ``<verdict>``, ...) and boxes a wrong answer; the server does not
split it (no reasoning parser), so the backend's ``reasoning.format: think`` must. The tree, the
funnel and the judges' verdicts must be exactly those of the same teacher without thinking.
"""

from __future__ import annotations

import json

import pytest
from omegaconf import open_dict
from support import thinking as T
from support.scripted_teacher import SEEDS, ScriptedBackend, configure, write_calibration_dir
from support.thinking import Reply, chat_server

from mbs.io import read_records, read_summary
from mbs.llm import close_all
from mbs.llm.base import ChatRequest, salted_seed, sample_seed
from mbs.records import TreeNode
from mbs.stages.synthesize import run

#: The teacher's reasoning format (the server sends raw <think> blocks; the backend splits them).
FMT = "think"
SMALL = ["thresholds.D=2", "thresholds.N_t=2", "thresholds.N_l=3", "thresholds.N_c=2", "thresholds.N=4", "verifier.workers=0"]


@pytest.fixture(autouse=True)
def _fresh_backends():
    close_all()
    yield
    close_all()


def _first_index(seed: int, messages: list, run_seed: int = 0) -> int:
    """Invert the openai backend's per-call seed ``sample_seed(base, first_index)``, where a teacher's
    base is the run's seed salted with its prompt (:func:`mbs.llm.base.salted_seed`)."""
    base = salted_seed(run_seed, json.dumps(messages, sort_keys=True))
    return next(i for i in range(4096) if sample_seed(base, i) == seed)


def scripted_replies(thinking: bool, cut: str | None = None):
    """A responder answering like the scripted teacher, optionally after a long thinking;
    prompts containing ``cut`` are cut off while thinking (after boxing the right answer 3)."""
    teacher = ScriptedBackend("teacher")

    def respond(body, n):
        req = ChatRequest(messages=body["messages"], n=n, max_tokens=int(body["max_tokens"]), seed=0,
                          first_index=_first_index(int(body["seed"]), body["messages"]))
        if cut and cut in body["messages"][-1]["content"]:
            return [Reply(None, T.thinking("11") + " so \\boxed{3}", "length")] * n
        texts = [c.text for c in teacher.generate([req])[0]]
        return [Reply(t, T.thinking("11") if thinking else "") for t in texts]

    return respond


def _run(make_cfg, cal, url, out, *more, revision=None):
    """``revision`` tells apart two scripted servers that serve different replies under one model
    name (the cache identifies a model by name and revision, never by its address)."""
    cfg = make_cfg("synthesize", ["method=mbs", f"calibration_dir={cal}", "synth.figures=false", *SMALL, *more], out=out)
    configure(cfg, judges=True)
    node = {"_target_": "mbs.llm.openai_backend.OpenAIBackend", "base_url": url, "model": "scripted-thinker",
            "max_retries": 0, "label": "scripted", "revision": revision,
            "reasoning": {"format": FMT, "chat_template_kwargs": {}, "effort": None}}
    with open_dict(cfg):
        cfg.teacher.pool[0].backend = node
        for j in cfg.mbs.judges.pool:
            j.backend = node
    return run(cfg)


def _drop(obj, keys):
    if isinstance(obj, dict):
        return {k: _drop(v, keys) for k, v in obj.items() if k not in keys}
    if isinstance(obj, list):
        return [_drop(v, keys) for v in obj]
    return obj


#: What thinking legitimately changes: token counts (the budget counts the thinking) and the
#: stored Stage-1 trace (which keeps the reasoning; compared separately).
VARYING = {"tokens", "teacher_tokens", "all_tokens", "reasoning_tokens", "trace", "trace_reasoning"}  # all_tokens: teacher tokens in it


def _tree(run_dir) -> dict[str, dict]:
    """Every node, without the fields thinking legitimately changes."""
    return {n.node_id: _drop(json.loads(json.dumps(n, default=lambda o: o.__dict__)), VARYING)
            for n in read_records(run_dir, "trees", TreeNode)}


def test_thinking_teacher_and_judges_build_the_same_tree(make_cfg, tmp_path):
    cal = write_calibration_dir(tmp_path / "cal", SEEDS)
    runs = {}
    for thinking in (False, True):
        with chat_server(scripted_replies(thinking), shape="raw") as (url, seen):
            runs[thinking] = _run(make_cfg, cal, url, out=f"mbs-{thinking}", revision=f"thinking-{thinking}")
        assert seen.bodies and all("<think>" not in json.dumps(b["messages"]) for b in seen.bodies)
    plain, thought = runs[False], runs[True]
    assert _tree(thought) == _tree(plain)
    sp, st = read_summary(plain), read_summary(thought)
    assert st["funnel"] == sp["funnel"] and st["qualified_problems"] == sp["qualified_problems"] == 2
    assert st["judges"] == sp["judges"]
    assert st["teacher_tokens"] > sp["teacher_tokens"]  # the thinking is paid for: the budget counts it
    # the thinking boxed 11 (wrong) in every reply: never what Stage 1 verified
    root = {n.node_id: n for n in read_records(thought, "trees", TreeNode)}["toy/main/0"]
    assert [(a["index"], a["score"]) for a in root.problem.metadata["mbs"]["trace_attempts"]] == [(0, 0.0), (1, 1.0)]
    # the stored Stage-1 trace keeps the written solution and, beside it, the reasoning
    assert root.trace == "Carefully: \\boxed{12}." and root.trace_reasoning == T.thinking("11")
    assert root.problem.metadata["mbs"]["trace_attempts"][1]["reasoning_tokens"] > 0


def test_later_prompts_get_the_solution_by_default_and_the_blueprint_on_request(make_cfg, tmp_path):
    cal = write_calibration_dir(tmp_path / "cal", SEEDS)
    prompts = {}
    for context in ("solution", "reasoning"):
        with chat_server(scripted_replies(True), shape="raw") as (url, seen):
            runs = _run(make_cfg, cal, url, f"mbs-{context}", f"mbs.trace_context={context}")
        # the first decomposition prompt of the root (its solution is the verified Stage-1 trace)
        prompts[context] = next(b["messages"][-1]["content"] for b in seen.bodies
                                if "[[ROOT]]" in b["messages"][-1]["content"] and "subproblem" in b["messages"][-1]["content"])
        assert read_summary(runs)["qualified_problems"] == 2  # the same tree either way
    assert "Carefully: \\boxed{12}." in prompts["solution"] and "The user wants the output" not in prompts["solution"]
    assert T.thinking("11") + "\n\nCarefully: \\boxed{12}." in prompts["reasoning"]


def test_a_trace_cut_off_while_thinking_is_rejected_unread(make_cfg, tmp_path):
    """NONE's traces are cut off after boxing its true answer 3 in the thinking: never verified."""
    from mbs.reasoning import CUT_OFF_REASON

    cal = write_calibration_dir(tmp_path / "cal", SEEDS)
    with chat_server(scripted_replies(True, cut="[[NONE]]"), shape="raw") as (url, _):
        out = _run(make_cfg, cal, url, "mbs-cut")
    none = {n.node_id: n for n in read_records(out, "trees", TreeNode)}["toy/none/0"]
    attempts = none.problem.metadata["mbs"]["trace_attempts"]
    assert [(a["score"], a["reason"], a["finish_reason"]) for a in attempts if a["index"] is not None] == [
        (0.0, CUT_OFF_REASON, "length")] * 2
    assert none.status == "no_trace" and none.trace is None and none.trace_reasoning is None
