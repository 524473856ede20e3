"""Golden Goose with a thinking teacher and a thinking student, on LaTeX-heavy passages.

The teacher (gpt-oss harmony channels, raw) drafts in its analysis channel, mentioning every tag
(``<span>``, ``<distractor>``, ``<passage>``) before its final reply; the student (Qwen3) thinks
before ``Answer: X`` and is sometimes cut off while thinking, after naming the right option in its
thinking. Items must keep every LaTeX command of the passage byte for byte, and the difficulty
filter must grade exactly as for the same backends without thinking.
"""

from __future__ import annotations

import json

import pytest
from omegaconf import OmegaConf, open_dict
from support.goose_teacher import CUT, student_overrides

from mbs.io import read_records, read_summary
from mbs.llm import close_all
from mbs.reasoning import CUT_OFF_REASON
from mbs.records import MCQ, Rollout
from mbs.stages.synthesize import run
from mbs.synth.goose.replies import format_mask_reply

COMMANDS = ("\\frac", "\\times", "\\sqrt", "\\cdot", "\\binom", "\\le", "\\{", "\\}", "\\\\")


@pytest.fixture(autouse=True)
def _fresh_backends():
    close_all()
    yield
    close_all()


def latex_passage(i: int, people: int) -> tuple[str, str, list[str]]:
    """Passage Q<i> full of LaTeX that JSON strings corrupt; its key step and 8 distractors."""
    pairs, half = people * (people - 1), people * (people - 1) // 2
    span = (f"Since each handshake is counted twice, there are $\\frac{{{people} \\times {people - 1}}}{{2}} = {half}"
            f" = \\binom{{{people}}}{{2}}$ handshakes, and $\\sqrt{{{half * half}}} \\cdot 1 = {half}$.")
    text = (
        f"Passage Q{i}. We count the handshakes among the people $\\{{p_1, \\dots, p_{{{people}}}\\}}$. Each person "
        f"shakes $n - 1 \\le {people}$ hands, which gives ${people} \\times {people - 1} = {pairs}$ ordered pairs "
        f"\\\\ of people. {span} That is the whole count."
    )
    wrong = [v for v in range(half - 6, half + 7) if v != half][:8]
    distractors = [span.replace(f"{{2}} = {half}", f"{{2}} = {v}", 1) for v in wrong]
    return text, span, distractors


def _run(make_cfg, tmp_path, think: bool, out: str, extra_passage: bool = False):
    rows, replies, spans = [], {}, {}
    for i in range(1, 4):
        text, span, ds = latex_passage(i, 5 + i)
        rows.append({"id": f"q{i}", "text": text})
        replies[f"Passage Q{i}."] = format_mask_reply(span, ds)
        spans[f"toy/q{i}"] = (text, span, ds)
    if extra_passage:  # a fourth passage whose teacher reply is cut off while thinking
        text, _, _ = latex_passage(4, 9)
        rows.append({"id": "q4", "text": text})
        replies["Passage Q4."] = CUT
    tmp_path.mkdir(parents=True, exist_ok=True)
    corpus = tmp_path / "latex.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows))
    student = {"picks": {spans["toy/q1"][1]: 0.5, spans["toy/q2"][1]: 1.0}, "truncate": 0.3,
               "think": "qwen3" if think else None}
    cfg = make_cfg("synthesize", [
        "method=goose", "goose.source=jsonl", f"goose.path={corpus}", "goose.id_field=id", "goose.origin=toy",
        "synth.figures=false", "verifier.workers=0", *student_overrides(),
        # the scripted distractors are single edits of the span, which the shortcut audit rejects
        # (tests/synth/test_goose_audit.py); this test is about the reply format, so it only reports
        "goose.audit.policy=report",
    ], out=out)
    with open_dict(cfg):
        cfg.backend.update(student)
        cfg.teacher.pool[0].name = "scripted"
        cfg.teacher.pool[0].backend = OmegaConf.create({
            "_target_": "support.goose_teacher.ScriptedTeacher", "replies": replies, "name": "scripted",
            "think": "harmony_raw" if think else None,
        })
    return run(cfg), spans


def test_thinking_teacher_items_keep_every_latex_command_byte_for_byte(make_cfg, tmp_path):
    out, spans = _run(make_cfg, tmp_path, think=True, out="think", extra_passage=True)
    s = read_summary(out)
    assert s["items_built"] == 3 and s["rejected"] == {"teacher_cut_off": 1}
    (rej,) = read_records(out, "rejected")
    assert rej["passage_id"] == "toy/q4" and "cut off while thinking" in rej["detail"]
    for m in read_records(out, "mcq", MCQ):
        text, span, ds = spans[m.source_id]
        assert m.span == span and sorted(m.distractors) == sorted(ds)  # byte for byte
        assert m.masked_passage.replace("[MASK]", m.span) == text
        assert text[m.span_offsets[0]:m.span_offsets[1]] == span
        for option in m.options:
            assert all(c not in option for c in "\t\x0c\b\r") and "<span>" not in option and "analysis" not in option
        assert all(cmd in text for cmd in COMMANDS) and all(c in span for c in ("\\frac", "\\times", "\\sqrt", "\\cdot", "\\binom"))


def test_thinking_student_is_graded_like_the_plain_one_and_cut_offs_score_zero(make_cfg, tmp_path):
    thought, _ = _run(make_cfg, tmp_path / "a", think=True, out="think")
    plain, _ = _run(make_cfg, tmp_path / "b", think=False, out="plain")
    def by_item(run_dir):
        return {it["id"]: (it["options"], it["answer"], it["n"], it["successes"], it["band"]) for it in read_records(run_dir, "items")}

    assert by_item(thought) == by_item(plain)
    rollouts = read_records(thought, "rollouts", Rollout)
    cut = [r for r in rollouts if r.finish_reason == "length"]
    assert cut and all(r.reward == 0.0 and r.reason == CUT_OFF_REASON and "Answer: " in r.reasoning for r in cut)
    done = [r for r in rollouts if r.finish_reason == "stop"]
    assert done and all(r.text.startswith("Let me compare the options.") and "<problem>" in r.reasoning for r in done)
    assert any(r.reward == 1.0 for r in done)
