"""CONTRIBUTING.md's promises, kept: a new answer type and a new synthesis method plug in from a
module of their own, with no edit of mbs's code.

The answer type ``word`` (a word in ``\\boxed{}``, compared ignoring case) and the method ``echo``
(each hard seed again, restated) live in temporary modules written here; the test registers
them by importing those modules, adds the answer type's prompt template and its one config line
(``answer_templates.word``), and runs them through the real stages: calibration, export and the
verl reward for the answer type, ``mbs-synthesize`` for the method.
"""

from __future__ import annotations

import importlib
import json
import shutil
import textwrap

import pyarrow.parquet as pq
import pytest

from mbs import prompts
from mbs import rewards
from mbs.io import RunDirError, read_manifest, read_records, read_summary
from mbs.records import Calibration, Problem
from mbs.stages.calibrate import run as calibrate
from mbs.stages.export import run as export
from mbs.stages.synthesize import run as synthesize
from mbs.synth.methods import METHODS
from mbs.verify import ANSWER_TYPES, VERIFIERS, grade
from mbs.verify.sources import row_verifier

# file 1 of a new answer type: its grader and its spec (file 2 would import it in mbs/verify/__init__.py)
WORD_TYPE = '''
import re

from mbs.verify.registry import AnswerType, Grade, register_answer_type

_BOXED = re.compile(r"\\\\boxed\\{([^{}]*)\\}")


def grade_word(response: str, ground_truth: str) -> Grade:
    found = _BOXED.findall(response)
    if not found:
        return Grade(0.0, None, "no boxed word")
    word = found[-1].strip()
    same = word.lower() == ground_truth.strip().lower()
    return Grade(1.0 if same else 0.0, word, "boxed: " + ("equal" if same else "not equal"))


register_answer_type(AnswerType(name="word", grader=grade_word, template="word_boxed_v1", probe="zzz"))
'''

# a new synthesis method: its run function and its spec (in mbs, one line in mbs/synth/methods.py)
ECHO_METHOD = '''
from mbs.figures.synthesis import synthesis_figures
from mbs.records import Problem
from mbs.synth.inputs import load_seeds
from mbs.synth.methods import MethodSpec, register_method
from mbs.verify.sources import data_source, origin_of


def run(settings, out):
    seeds = load_seeds(settings.inputs)
    prefix = settings.method_config.prefix  # its own config node (echo.prefix), read once by the stage
    problems = [Problem(id=s.id + "/echo", data_source=data_source(s.answer_type, origin_of(s) + "-echo"),
                        prompt=prefix + s.prompt, ground_truth=s.ground_truth, answer_type=s.answer_type,
                        parents=[s.id]) for s in seeds]
    out.shard("problems", Problem).append(problems)
    return {"counts": {"problems": len(problems)}, "hard_seeds": len(seeds)}


register_method(MethodSpec("echo", run, needs_seeds=True, figures=synthesis_figures))
'''

WORDS = [
    {"id": "easy", "problem": "EASY: spell 2", "answer": "Two"},
    {"id": "mixed", "problem": "MIXED: spell 5", "answer": "five"},
    {"id": "hard", "problem": "HARD: spell 56", "answer": "fifty-six"},
]


@pytest.fixture
def plugins(tmp_path, monkeypatch):
    """Import the two temporary modules (their registrations are undone afterwards), with the
    answer type's template beside mbs's own (file 3 of a new answer type)."""
    for registry in (VERIFIERS, ANSWER_TYPES, METHODS):
        monkeypatch.setattr(registry, "_items", dict(registry._items))
    code = tmp_path / "plugins"
    code.mkdir()
    (code / "toy_word_type.py").write_text(textwrap.dedent(WORD_TYPE))
    (code / "toy_echo_method.py").write_text(textwrap.dedent(ECHO_METHOD))
    monkeypatch.syspath_prepend(str(code))
    templates = tmp_path / "prompts"
    shutil.copytree(prompts.TEMPLATE_DIR, templates, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    (templates / "word_boxed_v1.txt").write_text("{problem}\nAnswer with one word in \\boxed{}.")
    monkeypatch.setattr(prompts, "TEMPLATE_DIR", templates)
    prompts.load_template.cache_clear()
    prompts.turns.cache_clear()
    prompts._placeholders.cache_clear()
    for name in ("toy_word_type", "toy_echo_method"):
        importlib.import_module(name)
    yield
    prompts.load_template.cache_clear()
    prompts.turns.cache_clear()
    prompts._placeholders.cache_clear()
    for name in ("toy_word_type", "toy_echo_method"):
        importlib.sys.modules.pop(name, None)


def _calibrate(make_cfg, tmp_path):
    data = tmp_path / "words.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in WORDS))
    overrides = [
        "data=jsonl", f"data.path={data}", "data.origin=words", "data.answer_type=word",
        "+answer_templates.word=word_boxed_v1",  # the one config line (conf/base.yaml)
        "calibrate.n=4", "calibrate.budgets=[64]", "calibrate.figures=false",
        "verifier.workers=0",  # the pool's workers import mbs.verify only: a plug-in grades in-process
        "~backend", "+backend._target_=support.fakes.FakeBackend", "+backend.label=fake",
        "+backend.answers={EASY: 'two', MIXED: 'FIVE', HARD: 'fifty-six'}",
        "+backend.rates={EASY: 1.0, MIXED: 0.5, HARD: 0.0}",
    ]
    return calibrate(make_cfg("calibrate", overrides, out="cal"))


def test_a_new_answer_type_from_its_own_module(plugins, make_cfg, tmp_path, monkeypatch):
    assert grade("so it is \\boxed{TWO}", "two", "word").score == 1.0
    cal = _calibrate(make_cfg, tmp_path)
    cals = {c.problem_id: c for c in read_records(cal, "calibrations", Calibration)}
    assert cals["words/easy"].band == "solved_all" and cals["words/easy"].pass_rate == 1.0
    assert cals["words/mixed"].band == "goldilocks" and 0 < cals["words/mixed"].successes < 4
    assert cals["words/hard"].band == "failed_all"
    # the gold self-check used the type's spec: no gold is ungradable, so the failed problem is a hard seed
    seeds = read_records(cal, "hard_seeds", Problem)
    assert [(p.id, p.answer_type, p.data_source) for p in seeds] == [("words/hard", "word", "mbs/word/words")]

    out = export(make_cfg("export", [f"export.runs=[{cal}]", "export.split.val_fraction=0.0",
                                     "export.decontam.enabled=false", "+answer_templates.word=word_boxed_v1"], out="exp"))
    rows = pq.read_table(out / "train.parquet").to_pylist()
    assert [r["extra_info"]["id"] for r in rows] == ["words/mixed"]  # the Goldilocks problem (export.select)
    row = rows[0]
    assert row["data_source"] == "mbs/word/words" and row["extra_info"]["verifier"] == "word"
    assert row["prompt"][0]["content"] == "MIXED: spell 5\nAnswer with one word in \\boxed{}."
    gold = row["reward_model"]["ground_truth"]
    assert row_verifier(row["data_source"], gold) == "word"
    monkeypatch.setenv("MBS_REWARD_WORKERS", "0")
    monkeypatch.setattr(rewards, "_pool", None)
    assert rewards.compute_score(row["data_source"], "\\boxed{Five}", gold, reasoning_format="none")["score"] == 1.0
    assert rewards.compute_score(row["data_source"], "\\boxed{six}", gold, reasoning_format="none")["score"] == 0.0


def test_a_new_synthesis_method_from_its_own_module(plugins, make_cfg, tmp_path):
    cal = _calibrate(make_cfg, tmp_path)
    args = ["method=echo", f"calibration_dir={cal}", "+answer_templates.word=word_boxed_v1", "+echo.prefix='Again: '"]
    out = synthesize(make_cfg("synthesize", args, out="syn"))
    s = read_summary(out)
    assert s["method"] == "echo" and s["hard_seeds"] == 1
    made = read_records(out, "problems", Problem)
    assert [(p.id, p.prompt, p.parents, p.data_source) for p in made] == [
        ("words/hard/echo", "Again: HARD: spell 56", ["words/hard"], "mbs/word/words-echo")]
    assert read_manifest(out)["counts"] == {"problems": 1}
    assert (out / "figures").is_dir()  # the spec's figures were drawn (or skipped, saying why)
    # its own node is part of the sampling config (MethodSpec.sampling_keys, default: the node):
    # resuming the same run directory under another prefix is refused, naming the key
    assert json.loads((out / "sampling.json").read_text())["config"]["echo.prefix"] == "Again: "
    with pytest.raises(RunDirError, match=r'echo\.prefix: "Again: " -> "Other: "'):
        synthesize(make_cfg("synthesize", [*args[:-1], "+echo.prefix='Other: '"], out="syn"))


# a new Golden Goose source: passages from its own keys (goose.shop.*), read from SourceSettings.group
SHOP_SOURCE = '''
from mbs.synth.goose.sources import Passage, register_source, segment


@register_source("shop")
def shop(source, report):
    own = source.group  # its own group goose.shop, resolved by the stage
    for i in range(int(own.count)):
        a, b, c = 3 + i, 7 + 2 * i, 11 + i
        text = (f"A shop sells {a} {own.item} at {b} dollars each and we want the total cost.\\n"
                f"Since each one costs {b} dollars, {a} of them cost {a}*{b}={a * b} dollars.\\n"
                f"Then a delivery fee of {c} dollars is added, so we get {a * b}+{c}={a * b + c} dollars.\\n"
                f"Therefore the total cost is {a * b + c} dollars.")
        yield Passage(id=f"{source.origin}/{i}", text=text, origin=source.origin,
                      steps=segment(text, source.segment), where=f"shop item {i}")
'''


def test_a_new_goose_source_from_its_own_module(make_cfg, tmp_path, monkeypatch):
    from mbs.synth.goose.sources import SOURCES

    monkeypatch.setattr(SOURCES, "_items", dict(SOURCES._items))
    code = tmp_path / "plugins"
    code.mkdir()
    (code / "toy_shop_source.py").write_text(textwrap.dedent(SHOP_SOURCE))
    monkeypatch.syspath_prepend(str(code))
    importlib.import_module("toy_shop_source")
    try:
        args = ["method=goose", "goose.source=shop", "goose.segment=lines", "goose.teacher_free=true",
                "goose.filter.enabled=false", "goose.audit.policy=report", "+goose.shop.count=3",
                "+goose.shop.item=pens", "synth.figures=false", "verifier.workers=0"]
        out = synthesize(make_cfg("synthesize", args, out="shop"))
    finally:
        importlib.sys.modules.pop("toy_shop_source", None)
    s = read_summary(out)
    assert s["source"] == "shop" and s["passages"] == 3 and s["items_built"] == 3
    items = read_records(out, "items")
    assert [it["source_id"] for it in items] == ["shop/0", "shop/1", "shop/2"]
    assert all(it["data_source"] == "mbs/mcq/goose-shop" and "pens" in it["question"] for it in items)
