"""mbs-synthesize method=goose end to end on scripted backends: teacher-free CHAMP items, the
LLM-teacher path fed deliberately bad output, extraction, the difficulty filter, resume."""

from __future__ import annotations

import json

import pytest
from omegaconf import OmegaConf, open_dict
from support.goose_teacher import student_overrides

from mbs.calibration.estimate import pass_rate_estimate
from mbs.io import read_manifest, read_records, read_summary, shard_files
from mbs.llm import close_all
from mbs.llm.base import BackendError
from mbs.llm.segments import iter_entries
from mbs.records import MCQ, Calibration, Problem, Rollout
from mbs.stages.synthesize import run
from mbs.synth.goose.build import LETTERS, normalise
from mbs.synth.goose.replies import format_extract_reply, format_mask_reply
from mbs.synth.goose.run import chance_goldilocks_share


def champ_overrides(*more: str, limit: int = 6) -> list[str]:
    return [
        "method=goose", "goose.source=champ", "goose.teacher_free=true", f"data.limit={limit}",
        "synth.figures=false", "verifier.workers=0", *student_overrides(), *more,
    ]


def test_teacher_free_champ_end_to_end(make_cfg):
    out = run(make_cfg("synthesize", champ_overrides()))
    s = read_summary(out)
    assert s["method"] == "goose" and s["source"] == "champ" and s["teacher_free"]
    assert s["passages"] == 6 and s["items_built"] + s["rejected_total"] == 6
    assert s["items_built"] == 6 and s["rejected"] == {}
    assert s["options"] == 9 and s["backends"].keys() == {"student"}  # no teacher: no LLM for construction

    items = read_records(out, "items")
    assert len(items) == 6
    for it in items:
        assert len(it["options"]) == 9 and it["answer"] in LETTERS[:9]
        assert it["options"][LETTERS.index(it["answer"])] == it["span"]
        assert len({normalise(o) for o in it["options"]}) == 9
        assert "[MASK]" in it["question"] and all(o.split("\n")[0] in it["question"] for o in it["options"])
        assert it["data_source"] == "mbs/mcq/goose-champ" and it["source_id"].startswith("champ/P_")
        assert it["option_origins"].count("answer") == 1
        assert all(o.startswith(("perturb:", "wrong_step:")) for o in it["option_origins"] if o != "answer")
        assert it["kept"] == (it["band"] == "goldilocks")
        assert 2 <= it["n"] <= 16 and it["pass_rate"] == it["successes"] / it["n"]

    mcqs = read_records(out, "mcq", MCQ)
    assert [m.id for m in mcqs] == [it["id"] for it in items]
    assert all(all(m.checks.values()) and m.masked_passage.replace("[MASK]", m.span).count(m.span) >= 1 for m in mcqs)

    cals = read_records(out, "calibrations", Calibration)
    assert len(cals) == 6 and all(c.n_target == 16 and c.budget == 256 for c in cals)  # goose.filter.budget=null: the student's L
    kept = [it for it in items if it["kept"]]
    assert s["kept"] == len(kept)
    assert s["effective_share"] == pytest.approx(len(kept) / 6)
    assert sum(s["bands"].values()) == pytest.approx(1.0)

    problems = read_records(out, "problems", Problem)
    assert [p.id for p in problems] == [it["id"] for it in kept]
    by_id = {it["id"]: it for it in items}
    for p in problems:
        assert p.answer_type == "mcq" and p.ground_truth == by_id[p.id]["answer"]
        assert p.data_source == "mbs/mcq/goose-champ" and p.prompt == by_id[p.id]["question"]
        assert p.parents == [by_id[p.id]["source_id"]] and p.metadata["band"] == "goldilocks"
        assert p.metadata["pass_rate"] == by_id[p.id]["pass_rate_est"]  # unbiased under early stopping (issue 41)
    # the rollouts of every item, replayed: its pass_rate_est is the estimate under synth.early_stop (batch 2)
    drawn = {}
    for r in sorted(read_records(out, "rollouts", Rollout), key=lambda r: r.sample_index):
        drawn.setdefault(r.problem_id, []).append(r)
    for it in items:
        assert it["pass_rate_est"] == pass_rate_estimate(drawn[it["id"]], 16, 2, "band")

    letters = s["letters"]["built"]["counts"]
    assert sum(letters.values()) == 6 and max(letters.values()) <= 1  # 6 items, 9 positions: all different
    # a uniformly guessing student: accuracy near chance, reported beside the band shares
    st = s["student"]
    assert st["chance"] == pytest.approx(1 / 9) and 0.0 <= st["accuracy"] <= 0.5
    assert st["accuracy"] == pytest.approx(sum(it["pass_rate_est"] for it in items) / 6) and st["accuracy_items"] == 6
    assert st["items_above_chance"] == sum(it["pass_rate_est"] > 1 / 9 for it in items) / 6
    assert st["chance_goldilocks_share"] == pytest.approx(1 - (8 / 9) ** 16 - (1 / 9) ** 16)
    rollouts = read_records(out, "rollouts", Rollout)
    assert len(rollouts) == s["filter"]["rollouts"] and all(r.budget == 256 for r in rollouts)
    m = read_manifest(out)
    assert m["counts"] == {"passages": 6, "items_built": 6, "rejected": 0, "kept": len(kept), "rollouts": len(rollouts)}


def test_chance_goldilocks_share():
    assert chance_goldilocks_share(9, 16) == pytest.approx(0.848, abs=1e-3)
    assert chance_goldilocks_share(3, 16) == pytest.approx(1 - (2 / 3) ** 16 - (1 / 3) ** 16)


def test_option_count_and_disabled_filter(make_cfg):
    out = run(make_cfg("synthesize", champ_overrides("goose.options=3", "goose.filter.enabled=false", limit=4)))
    s = read_summary(out)
    items = read_records(out, "items")
    assert s["options"] == 3 and all(len(it["options"]) == 3 and it["answer"] in "ABC" for it in items)
    assert s["effective_share"] is None and s["filter"]["rollouts"] == 0 and s["backends"] == {}
    assert all(it["kept"] is None and it["pass_rate"] is None for it in items)
    assert len(read_records(out, "problems", Problem)) == s["items_built"] == 4
    assert not shard_files(out, "rollouts")


def test_deterministic_given_the_seed(make_cfg):
    a = run(make_cfg("synthesize", champ_overrides("goose.filter.enabled=false"), out="a"))
    b = run(make_cfg("synthesize", champ_overrides("goose.filter.enabled=false"), out="b"))
    c = run(make_cfg("synthesize", champ_overrides("goose.filter.enabled=false", "seed=1"), out="c"))
    assert read_records(a, "mcq", MCQ) == read_records(b, "mcq", MCQ)
    assert [m.answer for m in read_records(a, "mcq", MCQ)] != [m.answer for m in read_records(c, "mcq", MCQ)]


# --------------------------------------------------------------------------------------
# The LLM-teacher path with a scripted teacher
# --------------------------------------------------------------------------------------


def handshake(i: int, people: int) -> tuple[str, str, list[str]]:
    """Passage P<i>: a worked count with a one-sentence key step; the span and 8 good distractors."""
    ordered = people * (people - 1)
    span = f"Since every handshake is counted twice, there are {ordered}/2={ordered // 2} handshakes."
    text = (
        f"Passage P{i}. We want the number of handshakes among {people} people. Each person shakes hands with "
        f"{people - 1} others, which gives {people}*{people - 1}={ordered} ordered pairs. {span} "
        "That is the whole count."
    )
    wrong = [v for v in range(ordered // 2 - 6, ordered // 2 + 7) if v != ordered // 2][:8]
    distractors = [f"Since every handshake is counted twice, there are {ordered}/2={v} handshakes." for v in wrong]
    return text, span, distractors


def reply(span: str, distractors: list[str]) -> str:
    return format_mask_reply(span, distractors)


def bad_teacher_corpus(tmp_path):
    rows, replies, spans = [], {}, {}
    for i in range(1, 8):
        text, span, ds = handshake(i, 4 + i)
        rows.append({"id": f"p{i}", "text": text})
        spans[i] = (span, ds)
    replies["Passage P1."] = reply(*spans[1])
    replies["Passage P2."] = reply(spans[2][0].replace("twice", "three times"), spans[2][1])  # span not in passage
    replies["Passage P3."] = reply(spans[3][0], spans[3][1][:7] + [spans[3][1][0]])  # duplicate distractors
    replies["Passage P4."] = reply(spans[4][0], spans[4][1][:7] + ["  " + spans[4][0].upper() + " "])  # equals the answer
    replies["Passage P5."] = reply(spans[5][0], spans[5][1][:3])  # 4 options when 9 were asked
    replies["Passage P6."] = reply(*spans[6]).split("</span>")[0]  # malformed (cut off inside the span)
    replies["Passage P7."] = "Sure, here it is:\n" + reply(*spans[7]) + "\nHope this helps."
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path, replies, spans


def teacher_cfg(make_cfg, corpus, replies, *more, out="run", student=None, **teacher_kw):
    cfg = make_cfg(
        "synthesize",
        [
            "method=goose", "goose.source=jsonl", f"goose.path={corpus}", "goose.id_field=id", "goose.origin=toy",
            "synth.figures=false", "verifier.workers=0", *student_overrides(), *more,
        ],
        out=out,
    )
    with open_dict(cfg):
        cfg.backend.update(student or {})
        cfg.teacher.pool[0].name = "scripted"
        cfg.teacher.pool[0].backend = OmegaConf.create(
            {"_target_": "support.goose_teacher.ScriptedTeacher", "replies": replies, "name": "scripted", **teacher_kw}
        )
    return cfg


def test_bad_teacher_output_is_rejected_with_its_reason(make_cfg, tmp_path):
    corpus, replies, spans = bad_teacher_corpus(tmp_path)
    student = {"picks": {spans[1][0]: 1.0, spans[7][0]: 0.0}}
    out = run(teacher_cfg(make_cfg, corpus, replies, student=student))
    s = read_summary(out)
    assert s["passages"] == 7 and s["items_built"] == 2
    assert s["rejected"] == {
        "span_not_in_passage": 1,
        "duplicate_distractors": 1,
        "distractor_equals_answer": 1,
        "wrong_option_count": 1,
        "malformed_reply": 1,
    }
    rejected = {r["passage_id"]: r["reason"] for r in read_records(out, "rejected")}
    assert rejected == {
        "toy/p2": "span_not_in_passage", "toy/p3": "duplicate_distractors", "toy/p4": "distractor_equals_answer",
        "toy/p5": "wrong_option_count", "toy/p6": "malformed_reply",
    }
    # nothing else is lost: both good items are complete and exactly as the teacher wrote them
    items = {it["source_id"]: it for it in read_records(out, "items")}
    assert set(items) == {"toy/p1", "toy/p7"}
    for i in (1, 7):
        it, (span, ds) = items[f"toy/p{i}"], spans[i]
        assert it["options"][LETTERS.index(it["answer"])] == span
        assert sorted(o for o in it["options"] if o != span) == sorted(ds)
        assert it["option_origins"].count("teacher:scripted") == 8
        assert it["question"].count("[MASK]") == 2 and span not in it["question"].split("Options:")[0]
    # the filter: the student always finds P1's answer (solved_all) and never P7's (failed_all)
    assert items["toy/p1"]["band"] == "solved_all" and items["toy/p7"]["band"] == "failed_all"
    assert s["effective_share"] == 0.0 and read_records(out, "problems") == []
    assert s["backends"]["teacher:scripted"]["samples"] == 7


def test_teacher_retries_a_rejected_reply(make_cfg, tmp_path):
    corpus, replies, spans = bad_teacher_corpus(tmp_path)
    replies["Passage P6."] = [replies["Passage P6."], reply(*spans[6])]  # malformed first, then good
    out = run(teacher_cfg(make_cfg, corpus, replies, "goose.teacher.attempts=2", "goose.filter.enabled=false"))
    s = read_summary(out)
    assert s["items_built"] == 3 and "malformed_reply" not in s["rejected"]
    assert s["attempt_rejections"]["malformed_reply"] == 1
    assert s["rejected_total"] == 4  # the other bad replies fail their second attempt too
    assert s["backends"]["teacher:scripted"]["samples"] == 7 + 5  # a second sample for each first failure


def test_extraction_drops_passages_with_a_reason(make_cfg, tmp_path):
    text, span, ds = handshake(1, 6)
    clean = text.replace("Passage P1.", "CLEAN1.")
    raw = [
        ("r1", f"RAW1 Home | Login | Ads. {text} Comments (3) Share this page"),
        ("r2", "RAW2 Buy cheap shoes now! Free shipping on all orders over fifty dollars."),
        ("r3", "RAW3 Menu. Short bit: 2+2=4. Footer."),
        ("r4", "RAW4 Our museum opens daily in summer and welcomes visitors of every age to its galleries of paintings, sculptures and textiles from many eras, with guided tours in four languages."),
        ("r5", "RAW5 Garbled page."),
    ]
    corpus = tmp_path / "web.jsonl"
    corpus.write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in raw))
    replies = {
        "RAW1": format_extract_reply(clean),
        "RAW2": format_extract_reply(None),
        "RAW3": format_extract_reply("Short bit: 2+2=4."),
        "RAW4": format_extract_reply(raw[3][1][5:]),
        "RAW5": "I could not read that page",
        "CLEAN1.": reply(span, ds),
    }
    out = run(teacher_cfg(make_cfg, corpus, replies, "goose.extract=true", "goose.filter.enabled=false"))
    s = read_summary(out)
    assert s["items_built"] == 1
    assert s["rejected"] == {"no_passage": 1, "passage_too_short": 1, "no_reasoning": 1, "malformed_reply": 1}
    stages = {r["passage_id"]: r["stage"] for r in read_records(out, "rejected")}
    assert set(stages.values()) == {"extract"}
    (it,) = read_records(out, "mcq", MCQ)
    assert it.masked_passage.startswith("CLEAN1.") and "Home | Login" not in it.masked_passage
    assert s["backends"]["teacher:scripted"]["samples"] == 5 + 1  # five extractions, one masking


def test_reference_teacher_is_refused(make_cfg, tmp_path):
    corpus, replies, _ = bad_teacher_corpus(tmp_path)
    with pytest.raises(ValueError, match="needs a live teacher"):
        run(teacher_cfg(make_cfg, corpus, replies, "goose.teacher.index=1"))


# --------------------------------------------------------------------------------------
# Resume: a killed run repeats no LLM call and loses nothing
# --------------------------------------------------------------------------------------


def _key(out):
    items = read_records(out, "items")
    rollouts = sorted((r.key, r.text, r.reward) for r in read_records(out, "rollouts", Rollout))
    s = read_summary(out)
    return items, rollouts, {k: s[k] for k in ("items_built", "rejected", "effective_share", "letters", "bands")}


def test_resume_after_kill_in_the_filter(make_cfg, tmp_path):
    clean = run(make_cfg("synthesize", champ_overrides(f"paths.cache_dir={tmp_path}/cache_clean"), out="clean"))
    total = read_summary(clean)["filter"]["rollouts"]
    close_all()
    with pytest.raises(BackendError):
        run(make_cfg("synthesize", champ_overrides("+backend.fail_after=30"), out="resumed"))
    close_all()
    assert not (tmp_path / "resumed" / "manifest.json").exists()
    drawn = len(read_records(tmp_path / "resumed", "rollouts", Rollout))
    cached = len(dict(iter_entries(tmp_path / "cache")))
    assert 0 < drawn <= cached <= 30 < total
    out = run(make_cfg("synthesize", champ_overrides(), out="resumed"))
    s = read_summary(out)
    assert s["filter"]["rollouts_resumed"] == drawn
    # every sample finished before the kill is read back or served by the cache, never drawn again
    assert s["backends"]["student"]["samples"] == total - cached
    assert s["backends"]["student"]["cache_hits"] == cached - drawn
    assert _key(out) == _key(clean)


def test_resume_after_kill_in_the_teacher(make_cfg, tmp_path):
    corpus, replies, _ = bad_teacher_corpus(tmp_path)
    clean = run(teacher_cfg(make_cfg, corpus, replies, f"paths.cache_dir={tmp_path}/cache_clean", out="clean"))
    close_all()
    with pytest.raises(BackendError):
        run(teacher_cfg(make_cfg, corpus, replies, out="resumed", fail_after=5))
    close_all()
    decided = len(read_records(tmp_path / "resumed", "candidates")) + len(read_records(tmp_path / "resumed", "rejected"))
    assert decided == 4  # the first batch of four replies was decided and written
    out = run(teacher_cfg(make_cfg, corpus, replies, out="resumed"))
    s = read_summary(out)
    assert s["resumed_decisions"] == 4
    assert s["backends"]["teacher:scripted"]["samples"] == 3 and s["backends"]["teacher:scripted"]["cache_hits"] == 0
    assert _key(out) == _key(clean)
    close_all()
    again = run(teacher_cfg(make_cfg, corpus, replies, out="again"))
    assert read_summary(again)["backends"]["teacher:scripted"]["samples"] == 0  # the cache serves every reply
    assert read_manifest(again)["backends"]["teacher:scripted"]["cache_hits"] == 7


def test_option_count_ablation_is_one_sweep_command():
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from mbs.cli import config_dir

    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
            cfg = compose("synthesize", overrides=["experiment=goose_options"], return_hydra_config=True)
    finally:
        GlobalHydra.instance().clear()
    assert (cfg.method, cfg.goose.source, cfg.goose.teacher_free, cfg.data.limit) == ("goose", "champ", True, 12)
    assert cfg.hydra.sweeper.params["goose.options"] == "3,5,9"  # `mbs-synthesize -m experiment=goose_options`
