"""mbs-calibrate with a thinking policy behind an OpenAI-compatible server with a reasoning parser.

The server (tests/support/thinking.py) answers in vLLM's ``reasoning_content`` shape: choice 0 of
each call thinks (drafts mention every tag, box a wrong guess) then answers correctly; choice 1 is
cut off by the budget while thinking, after boxing the *correct* answer inside its thinking.
"""

from __future__ import annotations

import pytest
from support import thinking as T
from support.thinking import Reply, chat_server

from mbs.io import read_records, read_summary
from mbs.llm import close_all
from mbs.reasoning import CUT_OFF_REASON
from mbs.records import Calibration, Rollout
from mbs.stages.calibrate import run

GOLD = {"EASY": "2", "MIXED": "5", "HARD": "56", "CUT": "5"}


@pytest.fixture(autouse=True)
def _fresh_backends():
    close_all()
    yield
    close_all()


def respond(body, n):
    key = body["messages"][-1]["content"]
    gold = next(v for k, v in GOLD.items() if f"{k}:" in key)
    ok = Reply(f"So the answer is $\\boxed{{{gold}}}$.", T.thinking("-1"))
    cut = Reply(None, f"{T.thinking('-1')} It must be \\boxed{{{gold}}}, checking", "length")
    return [(ok, cut)[j % 2] for j in range(n)]


@pytest.mark.parametrize("shape", ["reasoning_content", "reasoning"])
def test_rollouts_keep_the_servers_reasoning_and_cut_off_thinking_is_never_rewarded(make_cfg, toy_jsonl, shape):
    with chat_server(respond, shape) as (url, seen):
        out = run(make_cfg("calibrate", [
            "data=jsonl", f"data.path={toy_jsonl}", "data.origin=toy", "calibrate.n=4", "calibrate.budgets=[300]",
            "calibrate.figures=false", "backend=openai", f"backend.base_url={url}", "backend.model=r1",
            "backend.max_retries=0", "reasoning=deepseek_r1",
        ]))
    assert seen.bodies and all(b["max_tokens"] == 300 for b in seen.bodies)
    rollouts = read_records(out, "rollouts", Rollout)
    assert len(rollouts) == 16
    for r in rollouts:
        assert "<problem>" in r.reasoning and r.reasoning_tokens > 0  # the server's reasoning text, kept
        if r.finish_reason == "length":
            assert (r.reward, r.text, r.reason, r.extracted) == (0.0, "", CUT_OFF_REASON, None)
            assert r.reasoning_tokens == r.completion_tokens == 300
        else:
            assert r.reward == 1.0 and r.text.startswith("So the answer is") and r.reasoning_tokens < r.completion_tokens
    cals = read_records(out, "calibrations", Calibration)
    # half the rollouts answered correctly, half were cut off while thinking: Goldilocks, usable
    assert {c.problem_id: (c.successes, c.band, c.truncated) for c in cals} == {
        f"toy/{k}": (2, "goldilocks", 2) for k in ("easy", "mixed", "hard", "cut")}
    assert read_summary(out)["bands"]["r1"]["300"]["goldilocks"] == 1.0


def test_no_reasoning_format_configured_still_never_rewards_cut_off_thinking(make_cfg, toy_jsonl):
    """A server without a reasoning parser (the whole text in ``content``) and no reasoning
    preset: the default format ``auto`` finds the ``<think>`` blocks, so the cut-off half
    scores 0 (its thinking boxes the gold) and the finished half is graded on its answer."""
    with chat_server(respond, "raw") as (url, _):
        out = run(make_cfg("calibrate", [
            "data=jsonl", f"data.path={toy_jsonl}", "data.origin=toy", "calibrate.n=4", "calibrate.budgets=[300]",
            "calibrate.figures=false", "backend=openai", f"backend.base_url={url}", "backend.model=qwen3",
            "backend.max_retries=0",
        ]))
    rollouts = read_records(out, "rollouts", Rollout)
    assert len(rollouts) == 16
    for r in rollouts:
        assert "<problem>" in r.reasoning and "<think>" not in r.text
        if r.finish_reason == "length":
            assert (r.reward, r.text, r.reason) == (0.0, "", CUT_OFF_REASON)
        else:
            assert r.reward == 1.0 and r.text.startswith("So the answer is")
