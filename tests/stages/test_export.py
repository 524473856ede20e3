"""mbs-export end to end: calibration and synthesis runs in, verl parquet out, every removal explained."""

from __future__ import annotations

import json
import subprocess
import sys

import pyarrow.parquet as pq
import pytest
from omegaconf import OmegaConf
from support.fakes import fake_backend_overrides
from support.verl import source, verl_package_dir

from mbs.data import load_problems
from mbs.errors import ConfigError
from mbs.export.decontam import NgramIndex
from mbs.export.dedup import exact_duplicates, near_duplicates, normal_form, words
from mbs.export.mix import quotas, take
from mbs.export.sources import SourceError, sources_from_run
from mbs.export.verl_schema import SchemaError, check_verl_rows, write_parquet
from mbs.io import RunDir, read_manifest, read_summary
from mbs.prompts import user_messages
from mbs.records import Problem
from mbs.rewards import compute_score
from mbs.stages import calibrate
from mbs.stages.config import open_run
from mbs.stages.export import run
from mbs.stages.pipeline import export_runs
from mbs.training.train_data import check_train_data, known_sources

LONG = (
    "A farmer plants rows of beans along a straight fence that is exactly one hundred metres long and "
    "places a stake every four metres starting at the first corner post. Each stake holds three vines, "
    "and every vine yields the same number of pods during the warm season when the rain is steady. "
    "After the harvest the farmer counts all the pods and packs them into boxes of equal size for the "
    "market in the nearby town. How many stakes did the farmer place along the fence"
)


@pytest.fixture
def heldout_problem() -> Problem:
    """A CHAMP held-out problem with at least 13 words (the default decontamination benchmark)."""
    cfg = OmegaConf.create({"loader": "champ", "split": "heldout", "heldout_fraction": 0.2, "limit": None})
    problems, _ = load_problems(cfg)
    return next(p for p in problems if len(p.prompt.split()) >= 20)


@pytest.fixture
def cal_dir(make_cfg, toy_jsonl):
    """A real calibration run of the four toy problems with the scripted backend (budget 64)."""
    cfg = make_cfg(
        "calibrate",
        ["data=jsonl", f"data.path={toy_jsonl}", "data.origin=toy", "calibrate.n=8", "calibrate.budgets=[64]",
         "calibrate.figures=false", *fake_backend_overrides()],
        out="cal",
    )
    return calibrate.run(cfg)


def synth_problems(contaminated_text: str) -> list[Problem]:
    def p(pid, prompt, gt, answer_type="math", parents=("toy/hard",)):
        return Problem(id=f"mbs/{pid}", data_source=f"mbs/{answer_type.split(':')[0] if gt else 'none'}/synth",
                       prompt=prompt, ground_truth=gt, answer_type=answer_type, parents=list(parents))

    return [
        p("dup_exact", "mixed:   What is 2 + 3 ?", "5"),  # = toy/mixed after normalisation
        p("base", LONG + "?", "26"),
        p("near", LONG + " line?", "26"),  # one word more, same answer: near-duplicate of base
        p("variant", LONG.replace("one hundred", "two hundred") + "?", "51"),  # new numbers, new answer: kept
        p("contam", "Consider the following. " + contaminated_text, "7"),
        p("unverifiable", "Prove that there are infinitely many primes.", None, "unverifiable:proof"),
        p("mcq", "Which is prime?\nA. 4\nB. 5\nC. 6\nD. 8", "B", "mcq"),
        p("clean1", "What is 12 times 12?", "144"),
        p("clean2", "Compute 2^10.", "1024"),
        p("clean3", "What is the sum of the first ten positive integers?", "55"),
    ]


def make_synth_dir(path, problems, templates=None):
    out = open_run(OmegaConf.create({"synth": {"templates": templates or {"math": "math_boxed_v1", "mcq": "mcq_letter_v1"}}}), path, "synthesize")
    with out.shard("problems", Problem) as sh:
        sh.append(problems)
    out.write_summary({"method": "mbs"})
    return path


def rows(path):
    return pq.read_table(path).to_pylist()


def test_export_calibration_and_synthesis_runs(make_cfg, cal_dir, tmp_path, heldout_problem):
    syn = make_synth_dir(tmp_path / "syn", synth_problems(heldout_problem.prompt))
    out = run(make_cfg("export", [f"export.runs=[{cal_dir},{syn}]"], out="export"))

    removed = [json.loads(line) for line in (out / "removed.jsonl").read_text().splitlines()]
    why = {r["id"]: r for r in removed}
    assert set(why) == {"mbs/dup_exact", "mbs/near", "mbs/contam", "mbs/unverifiable"}
    assert why["mbs/dup_exact"]["reason"] == "exact_duplicate"
    assert why["mbs/dup_exact"]["detail"]["duplicate_of"] == "toy/mixed"  # the calibration source comes first
    assert why["mbs/dup_exact"]["detail"]["same_answer"] is True
    assert why["mbs/near"]["reason"] == "near_duplicate" and why["mbs/near"]["detail"]["duplicate_of"] == "mbs/base"
    assert why["mbs/near"]["detail"]["similarity"] >= 0.8
    assert why["mbs/contam"]["reason"] == "contaminated"
    assert why["mbs/contam"]["detail"]["benchmark"] == "champ_heldout"
    assert why["mbs/contam"]["detail"]["benchmark_id"] == heldout_problem.id
    assert why["mbs/contam"]["detail"]["overlaps"] == len(words(heldout_problem.prompt)) - 12  # every 13-gram of it
    assert why["mbs/unverifiable"]["reason"] == "unverifiable"

    train, val = rows(out / "train.parquet"), rows(out / "val.parquet")
    exported = {r["extra_info"]["id"]: r for r in train + val}
    # calibration source: only the usable problem (Goldilocks + complete correct) of the target policy
    assert set(exported) == {"toy/mixed", "mbs/base", "mbs/variant", "mbs/mcq", "mbs/clean1", "mbs/clean2", "mbs/clean3"}
    assert len(train) >= 1 and len(val) >= 1
    assert [r["extra_info"]["index"] for r in train] == list(range(len(train)))
    assert all(r["extra_info"]["split"] == "train" for r in train) and all(r["extra_info"]["split"] == "val" for r in val)

    mixed = exported["toy/mixed"]
    assert mixed["data_source"] == "mbs/math/toy" and mixed["ability"] == "math"
    assert mixed["reward_model"] == {"style": "rule", "ground_truth": "5"}
    # the prompt is the calibration template rendering, so training sees what calibration measured
    assert mixed["prompt"] == user_messages("math_boxed_v1", problem="MIXED: what is 2+3?")
    assert mixed["extra_info"]["kind"] == "calibration" and mixed["extra_info"]["source"] == "calibrate"
    mcq = exported["mbs/mcq"]
    assert mcq["prompt"][0]["content"].startswith("Answer the following multiple-choice question")
    assert mcq["data_source"] == "mbs/mcq/synth" and mcq["reward_model"]["ground_truth"] == "B"
    assert exported["mbs/variant"]["extra_info"]["parents"] == ["toy/hard"]

    s = read_summary(out)
    assert s["rows"] == {"train": len(train), "val": len(val)}
    assert s["removed"] == {"contaminated": 1, "exact_duplicate": 1, "near_duplicate": 1, "unverifiable": 1}
    assert s["sources"]["calibrate"]["loaded"] == 1 and s["sources"]["calibrate"]["selection"]["policy"] == "fake"
    assert s["sources"]["synthesize_mbs"] == {**s["sources"]["synthesize_mbs"], "loaded": 10, "clean": 6, "exported": 6}
    assert s["decontam"]["benchmarks"]["champ_heldout"] > 20
    assert read_manifest(out)["counts"]["removed"] == 4
    # the policy that calibrated each source, for mbs-train (mbs.training.provenance)
    pol = s["policy"]
    cal = pol["sources"]["calibrate"]
    assert (cal["policy"], cal["budget"], cal["n"], cal["temperature"], cal["top_p"]) == ("fake", 64, 8, 1.0, 1.0)
    # the test double names no weights: recorded, but no policy mbs-train would load (from a hub or anywhere)
    assert pol["trainable"] == [] and cal["trainable"] is False and "names no model weights mbs can train" in cal["why_not"]
    assert pol["sources"]["synthesize_mbs"]["trainable"] is False  # this hand-made run names no target student


def test_exported_parquet_is_what_verl_reads(make_cfg, cal_dir, tmp_path, heldout_problem):
    """Loaded as verl's RLHFDataset loads it; the fields its reader and reward manager use are there;
    the reward verl would call grades a correct response 1 and a wrong one 0."""
    verl_dir = verl_package_dir()
    dataset_src = source(verl_dir, "utils/dataset/rl_dataset.py")
    assert 'datasets.load_dataset("parquet", data_files=parquet_file)' in dataset_src
    assert 'self.prompt_key = config.get("prompt_key", "prompt")' in dataset_src
    assert 'row_dict.get("extra_info", {}).get("index", 0)' in dataset_src
    manager_src = source(verl_dir, "experimental/reward_loop/reward_manager/naive.py")
    assert 'data_item.non_tensor_batch["reward_model"]["ground_truth"]' in manager_src
    assert 'data_item.non_tensor_batch["data_source"]' in manager_src

    syn = make_synth_dir(tmp_path / "syn", synth_problems(heldout_problem.prompt))
    out = run(make_cfg("export", [f"export.runs=[{cal_dir},{syn}]"], out="export"))
    import datasets

    total = 0
    for split in ("train", "val"):
        total += check_verl_rows(out / f"{split}.parquet")
        for row in datasets.load_dataset("parquet", data_files=str(out / f"{split}.parquet"))["train"]:
            gt, extra = row["reward_model"]["ground_truth"], row["extra_info"]
            good = f"Answer: {gt}" if row["ability"] == "mcq" else f"So the answer is $\\boxed{{{gt}}}$."
            assert compute_score(row["data_source"], good, gt, extra)["score"] == 1.0, row["extra_info"]["id"]
            assert compute_score(row["data_source"], "no idea", gt, extra)["score"] == 0.0
    assert total == 7


def test_schema_check_names_the_bad_row(tmp_path):
    good = {"data_source": "mbs/math/x", "prompt": [{"role": "user", "content": "q"}], "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": "1"},
            "extra_info": {"index": 0, "split": "train", "id": "x/1", "source": "s", "kind": "data", "run_dir": "",
                           "parents": [], "verifier": "math", "answer_type": "math"}}
    bad = {**good, "reward_model": {"style": "rule", "ground_truth": ""}}
    path = write_parquet([good, bad], tmp_path / "t.parquet")
    with pytest.raises(SchemaError, match=r"t.parquet row 1: reward_model.ground_truth"):
        check_verl_rows(path)


def test_mixing_weights_set_the_ratio(make_cfg, cal_dir, tmp_path):
    syn = make_synth_dir(tmp_path / "syn", [
        Problem(id=f"mbs/q{i}", data_source="mbs/math/synth", prompt=f"What is {i} plus {i * 7 + 3}?", ground_truth=str(i * 8 + 3))
        for i in range(12)
    ])
    out = run(make_cfg("export", [f"export.runs=[{cal_dir},{syn}]", "export.select=all", "export.decontam.enabled=false",
                                  "export.weights={calibrate: 1, synthesize_mbs: 2}"], out="mixed"))
    s = read_summary(out)
    # 4 calibrated problems limit the total: 4 + 8 rows keep the 1:2 ratio without repeating a row
    assert s["sources"]["calibrate"]["exported"] == 4 and s["sources"]["synthesize_mbs"]["exported"] == 8
    ids = [r["extra_info"]["id"] for r in rows(out / "train.parquet") + rows(out / "val.parquet")]
    assert len(ids) == len(set(ids)) == 12
    # every row's source is one the export's provenance records: mbs-train's data check takes it whole
    assert known_sources(out) == ["calibrate", "synthesize_mbs"]
    assert check_train_data(out, sources=known_sources(out), drop={}).trained == s["rows"]["train"]

    with pytest.raises(ValueError, match="short of rows"):
        run(make_cfg("export", [f"export.runs=[{cal_dir},{syn}]", "export.decontam.enabled=false",
                                "export.weights={calibrate: 1, synthesize_mbs: 1}", "export.mix.total=10"], out="short"))
    with pytest.raises(ValueError, match=r"missing \['synthesize_mbs'\]"):
        run(make_cfg("export", [f"export.runs=[{cal_dir},{syn}]", "export.decontam.enabled=false",
                                "export.weights={calibrate: 1}"], out="missing"))


def test_template_mismatch_is_refused(make_cfg, tmp_path):
    syn = make_synth_dir(tmp_path / "syn", [Problem(id="a/1", data_source="mbs/math/a", prompt="1+1?", ground_truth="2")],
                         templates={"math": "math_other_v2", "mcq": "mcq_letter_v1"})
    with pytest.raises(ValueError, match=r"template 'math_other_v2'.*export.templates.math"):
        run(make_cfg("export", [f"export.runs=[{syn}]", "export.decontam.enabled=false"], out="bad"))


def test_data_config_source_and_pipeline_steps(make_cfg, cal_dir, toy_jsonl, tmp_path):
    pipe = RunDir(tmp_path / "pipe", "pipeline")
    pipe.write_summary({"steps": {"calibrate_live": "../cal"}})  # steps are relative to the pipeline folder
    srcs = sources_from_run(tmp_path / "pipe", "all", None, None)
    assert [s.name for s in srcs] == ["calibrate_live"] and len(srcs[0].problems) == 4

    out = export_runs(
        make_cfg("export", ["export.include_data=true", "data=jsonl", f"data.path={toy_jsonl}", "data.origin=toy",
                            "export.decontam.enabled=false"]),
        [tmp_path / "pipe"], tmp_path / "from_pipeline",
    )
    s = read_summary(out)
    # the pipeline's usable problem, then the data config's four, one of which repeats it
    assert s["sources"]["calibrate_live"]["exported"] == 1
    assert s["sources"]["data"] == {**s["sources"]["data"], "loaded": 4, "exported": 3, "removed": {"exact_duplicate": 1}}

    named = read_summary(export_runs(make_cfg("export", ["export.select=all", "export.decontam.enabled=false"]),
                                     {"seeds": cal_dir}, tmp_path / "named"))
    assert list(named["sources"]) == ["seeds"] and named["sources"]["seeds"]["exported"] == 4

    with pytest.raises(SourceError, match="stage 'export' cannot be exported"):
        sources_from_run(out, "usable", None, None)
    with pytest.raises(ValueError, match="no source"):
        run(make_cfg("export", [], out="none"))


def test_every_bad_export_key_is_named_at_once_and_nothing_is_written(make_cfg, tmp_path, cal_dir):
    """Issue 46: each bad ``export.*`` value is named (in one error, before anything is written),
    ``export.prompt_length.limit`` included."""
    bad = {
        "export.prompt_length.limit=-5": "export.prompt_length.limit=-5: must be an integer >= 1 or null",
        "export.select=best": "export.select='best': must be one of usable, solved_all, goldilocks, failed_all, all",
        "export.select_budget=0": "export.select_budget=0: must be",
        "export.mix.total=0": "export.mix.total=0: must be",
        "export.mix.repeat=maybe": "export.mix.repeat='maybe': must be one of True, False",
        "export.split.val_fraction=1.5": "export.split.val_fraction=1.5: must be",
        "export.dedup.near.num_perm=0": "export.dedup.near.num_perm=0: must be",
        "export.dedup.near.shingle=0": "export.dedup.near.shingle=0: must be",
        "export.dedup.near.threshold=2": "export.dedup.near.threshold=2: must be",
        "export.decontam.n=0": "export.decontam.n=0: must be",
        "export.weights={calibrate: -1}": "export.weights.calibrate=-1: must be a number >= 0",
    }
    with pytest.raises(ConfigError) as err:
        run(make_cfg("export", [f"export.runs=[{cal_dir}]", *bad], out="bad"))
    assert f"{len(bad)} config errors" in str(err.value)
    for line in bad.values():
        assert line in str(err.value), line
    assert not (tmp_path / "bad").exists()
    with pytest.raises(ConfigError, match=r"export.weights=\{'calibrate': 0\}: the weights must have a positive sum"):
        run(make_cfg("export", [f"export.runs=[{cal_dir}]", "export.weights={calibrate: 0}"], out="bad"))
    with pytest.raises(ConfigError, match=r"export.runs.0=\{'name': 'a'\}: must be a run folder"):
        run(make_cfg("export", ["export.runs=[{name: a}]"], out="bad"))
    assert not (tmp_path / "bad").exists()


def test_a_start_refused_for_its_inputs_writes_nothing(make_cfg, tmp_path, cal_dir):
    """Sources, the tokenizer and the rows are built before the run directory is opened: a missing
    source, a tokenizer that does not load or nothing to export leave no run directory, and the
    empty export says what each source held and why rows went, not a file it never wrote."""
    with pytest.raises(SourceError):
        run(make_cfg("export", [f"export.runs=[{tmp_path / 'missing'}]"], out="bad"))
    with pytest.raises(ConfigError, match="tokenizer='/nonexistent/tok' cannot be loaded"):
        run(make_cfg("export", [f"export.runs=[{cal_dir}]", "export.prompt_length.tokenizer=/nonexistent/tok",
                                "export.decontam.enabled=false"], out="bad"))
    syn = make_synth_dir(tmp_path / "syn", [
        Problem(id="mbs/p", data_source="mbs/none/synth", prompt="Prove it.", ground_truth=None, answer_type="unverifiable:proof"),
    ])
    with pytest.raises(ConfigError) as err:
        run(make_cfg("export", [f"export.runs=[{syn}]", "export.decontam.enabled=false"], out="bad"))
    msg = str(err.value)
    assert "nothing left to export" in msg and f"synthesize_mbs ({syn}): 1" in msg and "1 unverifiable" in msg, msg
    assert "removed.jsonl" not in msg and "nothing was written" in msg
    assert not (tmp_path / "bad").exists()


def test_cli_contract_writes_parquet_into_hydra_run_dir(tmp_path, cal_dir):
    out = tmp_path / "cli_export"
    code = ("import hydra; from mbs.cli import CONF; from mbs.stages.export import run; "
            "hydra.main(version_base='1.3', config_path=CONF, config_name='export')(run)()")
    subprocess.run(
        [sys.executable, "-c", code, f"export.runs=[{cal_dir}]", "export.select=all", f"hydra.run.dir={out}", f"paths.root={tmp_path}"],
        check=True, capture_output=True, timeout=1800,
    )
    assert (out / "train.parquet").is_file() and (out / "val.parquet").is_file()
    assert read_summary(out)["rows"] == {"train": 3, "val": 1}  # each split keeps at least one row


# ---------------------------------------------------------------------------- library units


def test_exact_and_near_duplicates():
    texts = ["What is 2+3?", "what  is 2 + 3 ?", LONG, LONG + " now", LONG.replace("four", "five"), "x^2", "x_2"]
    answers = ["5", "6", "26", "26", "21", "1", "1"]
    exact = exact_duplicates(texts, answers)
    assert [(d.index, d.kept, d.same_answer) for d in exact] == [(1, 0, False)]
    near = near_duplicates(texts, answers, skip={1})
    assert [(d.index, d.kept) for d in near] == [(3, 2)]  # the variant with a new answer stays
    assert 0.8 <= near[0].similarity <= 1.0
    loose = near_duplicates(texts, answers, skip={1}, same_answer_only=False, threshold=0.7)
    assert {d.index for d in loose} == {3, 4}
    assert normal_form("A  b") == normal_form("a b") and normal_form("x^2") != normal_form("x_2")
    with pytest.raises(ValueError, match="threshold"):
        near_duplicates(texts, answers, threshold=0)


def test_ngram_decontamination():
    bench = "the quick brown fox jumps over the lazy dog while the cat sleeps on the warm mat all day"
    index = NgramIndex(13, [("b", "b/1", bench), ("b", "b/2", "Find x.")])
    hit = index.check("Intro words. The QUICK brown fox jumps over the lazy dog while the cat sleeps on the warm mat")
    assert hit is not None and (hit.benchmark, hit.problem_id) == ("b", "b/1") and hit.overlaps == 5  # its 17 words hold five 13-grams
    assert index.check("the quick brown fox jumps over the lazy dog while the cat naps on a mat") is None  # 12 words shared
    assert index.check("Please find x. Then stop.").problem_id == "b/2"  # a short benchmark text inside
    assert index.check("lazy dog while the cat").problem_id == "b/1"  # a short training text inside a benchmark
    assert NgramIndex(5, [("b", "b/1", bench)]).check("a quick brown fox jumps over the hedge").overlaps == 2


def test_quotas_and_take():
    assert quotas({"a": 5, "b": 100}, {"a": 1, "b": 3}, None, False) == {"a": 5, "b": 15}
    assert quotas({"a": 5, "b": 100}, {"a": 1, "b": 1}, 7, False) == {"a": 4, "b": 3}
    assert quotas({"a": 2, "b": 100}, {"a": 1, "b": 1}, 10, True) == {"a": 5, "b": 5}
    with pytest.raises(ValueError, match="positive sum"):
        quotas({"a": 1}, {"a": 0}, None, False)
    items = list("abc")
    assert sorted(take(items, items, 3, 0)) == items
    assert take(items, items, 2, 0) == take(items, items, 2, 0)
    assert sorted(take(items, items, 7, 0)) == sorted(items * 2 + [take(items, items, 1, 0)[0]])


def test_a_family_never_straddles_the_split():
    from mbs.records import Problem
    from mbs.export.build import family_of, split_rows

    seed = Problem(id="champ/P_1", data_source="mbs/math/champ", prompt="p", ground_truth="1")
    variant = Problem(id="mbs/champ/P_1/0/1/v2", data_source="mbs/math/champ-mbs", prompt="q", ground_truth="2",
                      metadata={"seed_id": "champ/P_1"}, parents=["champ/P_1/0/1"])
    item = Problem(id="goose/champ/P_1", data_source="mbs/mcq/goose-champ", prompt="r", ground_truth="C",
                   answer_type="mcq", metadata={"source_id": "champ/P_1"}, parents=["champ/P_1"])
    other = Problem(id="corpus/7", data_source="mbs/math/corpus", prompt="s", ground_truth="3", parents=["corpus/line-7"])
    assert [family_of(p) for p in (seed, variant, item, other)] == ["champ/P_1"] * 3 + ["corpus/line-7"]
    keys = [f"champ/P_{i % 40}" for i in range(400)]
    flags = split_rows(keys, 0.2, "s")
    by_key = {}
    for k, f in zip(keys, flags):
        by_key.setdefault(k, set()).add(f)
    assert all(len(v) == 1 for v in by_key.values()) and 0 < sum(flags) < len(flags)
    # two families: each split gets one whole family, even when the hash puts both on one side
    for salt in ("a", "b", "c", "d"):
        flags = split_rows(["x", "x", "y", "y", "y"], 0.5, salt)
        assert flags[0] == flags[1] and flags[2] == flags[3] == flags[4] and flags[0] != flags[2]


def test_ungradable_golds_are_never_exported(cal_dir):
    """A problem the calibration run reported ungradable (its gold parses only in part) is left
    out of every selection, whatever band its calibration has."""
    everything = {p.id for p in sources_from_run(cal_dir, "all", None, None)[0].problems}
    assert "toy/mixed" in everything
    path = cal_dir / "summary.json"
    summary = json.loads(path.read_text())
    summary["ungradable"] = {"count": 1, "ids": ["toy/mixed"], "reasons": {"toy/mixed": "could not parse gold"}}
    path.write_text(json.dumps(summary))
    for select in ("all", "usable"):
        src = sources_from_run(cal_dir, select, None, None)[0]
        assert "toy/mixed" not in {p.id for p in src.problems}
        assert src.selection["ungradable_left_out"] == 1
    assert {p.id for p in sources_from_run(cal_dir, "all", None, None)[0].problems} == everything - {"toy/mixed"}
