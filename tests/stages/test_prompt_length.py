"""Export and train agree on prompt length: export reports rows over the training prompt length,
mbs-train derives verl's max_prompt_length from the data or refuses data with a longer prompt."""

from __future__ import annotations

import shlex

import pytest
from omegaconf import OmegaConf

from mbs.export.prompt_length import PER_MESSAGE, PromptCounter, length_report
from mbs.io import read_summary
from mbs.records import Problem
from mbs.stages.config import open_run
from mbs.stages.export import run as export
from mbs.stages.train import run as train
from mbs.stages.train import settings_of
from mbs.training.launch import TrainError
from mbs.training.verl_command import prompt_length

LONG = "A farmer plants beans along a fence and counts the pods of every vine in every row. " * 12 + "How many pods?"


def make_run(path) -> str:
    out = open_run(OmegaConf.create({"synth": {"templates": {"math": "math_boxed_v1", "mcq": "mcq_letter_v1"}}}), path, "synthesize")
    problems = [Problem(id=f"s/{i}", data_source="mbs/math/s", prompt=text, ground_truth=str(i), parents=[f"seed{i}"])
                for i, text in enumerate([LONG, "What is 2 + 3?", "Compute 2^10.", "What is 12 times 12?"])]
    with out.shard("problems", Problem) as sh:
        sh.append(problems)
    out.write_summary({"method": "mbs"})
    return str(path)


def test_export_reports_rows_over_the_training_prompt_length(make_cfg, tmp_path):
    run_dir = make_run(tmp_path / "syn")
    out = export(make_cfg("export", [f"export.runs=[{run_dir}]", "export.decontam.enabled=false", "export.prompt_length.limit=300"],
                          out="export"))
    pl = read_summary(out)["prompt_length"]
    assert pl["limit"] == 300 and pl["exact"] is False and pl["tokenizer"] is None
    assert pl["over_limit"]["all"] == 1 and [r["id"] for r in pl["over_limit_rows"]] == ["s/0"]
    longest = pl["max_tokens"]["all"]
    assert longest == pl["over_limit_rows"][0]["tokens"] > 300

    # a synthesis run names no trainable calibrated policy: the model is given explicitly
    given = ["train.model=Qwen/Qwen3-1.7B", "train.override=[model]"]
    # mbs-train derives max_prompt_length from the data (the longest prompt)...
    dry = train(make_cfg("train", ["train.dry_run=true", f"train.data_dir={out}", *given], out="dry"))
    s = read_summary(dry)
    args = dict(a.split("=", 1) for a in s["command"][3:])
    assert args["data.max_prompt_length"] == str(longest)
    assert s["prompt_length"]["derived"] is True and s["prompt_length"]["max_prompt_length"] == longest
    # ...and refuses a configured length that verl would silently filter rows at
    with pytest.raises(TrainError, match=r"1 row\(s\) have prompts longer than train.verl.data.max_prompt_length=300 tokens"):
        train(make_cfg("train", [f"train.data_dir={out}", "train.verl.data.max_prompt_length=300", *given], out="refused"))
    ok = prompt_length(settings_of(make_cfg("train", [f"train.data_dir={out}", f"train.verl.data.max_prompt_length={longest}",
                                                      *given])))
    assert ok["max_prompt_length"] == longest and ok["derived"] is False and ok["over_limit"]["all"] == 0
    assert shlex.join(s["command"])  # printable


def test_upper_bound_counts_bytes_and_template_tokens():
    c = PromptCounter(None)
    msgs = [{"role": "user", "content": "héllo"}]
    assert c.count(msgs) == 6 + PER_MESSAGE and not c.exact
    rep = length_report([("a", "train", msgs), ("b", "val", [{"role": "user", "content": "x" * 50}])], c, 30)
    assert rep["max_tokens"] == {"train": 22, "val": 66, "all": 66}
    assert rep["over_limit"] == {"train": 0, "val": 1, "all": 1} and rep["over_limit_rows"] == [{"id": "b", "split": "val", "tokens": 66}]
    with pytest.raises(ValueError, match="tokenizer='/nonexistent'"):
        PromptCounter("/nonexistent")


def test_exact_count_reads_the_ids_of_a_batch_encoding():
    """transformers 5's apply_chat_template(tokenize=True) returns a mapping: its ids are counted, not its keys."""

    class Tok:
        def __init__(self, as_mapping):
            self.as_mapping = as_mapping

        def apply_chat_template(self, messages, add_generation_prompt, tokenize):
            ids = list(range(7 + len(messages[0]["content"])))
            return {"input_ids": ids, "attention_mask": [1] * len(ids)} if self.as_mapping else ids

    msgs = [{"role": "user", "content": "What is 2+3?"}]
    for as_mapping in (True, False):
        c = PromptCounter(None)
        c.tok = Tok(as_mapping)
        assert c.exact and c.count(msgs) == 19
