"""verl's ``RLHFDataset`` loads mbs-export's parquet with the target's tokenizer and chat template,
and drops exactly the rows export reported over the prompt length.

mbs-export and mbs-train run in ``.venv-verl`` (mbs beside verl, as ``mbs[train]`` installs
them) with the embedded model's tokenizer (SmolLM2's, from its GGUF, with its chat template);
verl's dataset is built from the dry run's own command, as verl's trainer builds it.
"""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest
from omegaconf import OmegaConf
from support.verl_runtime import run_mbs, run_script

from mbs.io import read_summary
from mbs.records import Problem
from mbs.stages.config import open_run

pytestmark = pytest.mark.verl

#: Export's prompt-length limit in this test (tokens): the short prompts fit, the long ones do not.
LIMIT = 150
SHORT = ["What is 2 + 3?", "Compute 2^10.", "What is 12 times 12?", "How many primes are below 20?"]
LONG = [f"Field {i} holds {' '.join(f'{7 * i + j} rows of {11 * j + i} beans,' for j in range(8 + 6 * i))} "
        f"and the farmer sells half. How many beans are left in field {i}?" for i in range(4)]


def synth_run(path) -> str:
    """A synthesize run holding the short and long problems (distinct answers: no near-duplicates)."""
    out = open_run(OmegaConf.create({"synth": {"templates": {"math": "math_boxed_v1", "mcq": "mcq_letter_v1"}}}), path, "synthesize")
    problems = [Problem(id=f"s/{i}", data_source="mbs/math/s", prompt=text, ground_truth=str(100 + i), parents=[f"seed{i}"])
                for i, text in enumerate(SHORT + LONG)]
    with out.shard("problems", Problem) as sh:
        sh.append(problems)
    out.write_summary({"method": "mbs"})
    return str(path)


def test_verl_drops_exactly_the_rows_export_reported_over_long(tmp_path, tokenizer_dir):
    runs = synth_run(tmp_path / "syn")
    export = run_mbs("mbs-export", [f"export.runs=[{runs}]", "export.decontam.enabled=false", "export.split.val_fraction=0.5",
                                    f"export.prompt_length.limit={LIMIT}", f"export.prompt_length.tokenizer={tokenizer_dir}"],
                     tmp_path, out="export")
    report = read_summary(export)["prompt_length"]
    assert report["exact"] is True and report["limit"] == LIMIT
    over = {r["id"] for r in report["over_limit_rows"]}
    rows = {split: sorted(r["extra_info"]["id"] for r in pq.read_table(export / f"{split}.parquet").to_pylist())
            for split in ("train", "val")}
    everything = set(rows["train"]) | set(rows["val"])
    assert len(everything) == 8 and 0 < len(over) < 8 and len(over) == report["over_limit"]["all"]
    assert all(0 < len(set(rows[s]) - over) for s in rows)  # each split keeps rows

    # the hand-made synthesis run names no calibrated policy: the model (SmolLM2, whose tokenizer counts) is given
    dry = run_mbs("mbs-train", ["train.dry_run=true", f"train.data_dir={export}", f"train.tokenizer={tokenizer_dir}",
                                f"train.model={tokenizer_dir}", "train.override=[model]"],
                  tmp_path, out="dry")
    s = read_summary(dry)
    command = s["command"][3:]
    derived = s["prompt_length"]["max_prompt_length"]
    assert s["prompt_length"]["derived"] is True and derived == report["max_tokens"]["all"] > LIMIT

    # 1. the dry run's own command: verl keeps every exported row (mbs-train derived the longest prompt)
    got = run_script("dataset.py", {"overrides": command, "tokenizer": str(tokenizer_dir)}, tmp_path)
    assert got["filter_overlong_prompts"] is True and got["max_prompt_length"] == derived
    assert got["kept"] == rows
    # mbs counted every prompt exactly as verl's filter does
    assert max(got["tokens"].values()) == derived
    assert {sp: max(got["tokens"][i] for i in ids) for sp, ids in rows.items()} == {
        sp: report["max_tokens"][sp] for sp in rows}
    assert {r["id"]: r["tokens"] for r in report["over_limit_rows"]} == {i: got["tokens"][i] for i in over}
    # what verl's trainer then hands the rollout and the reward: the chat messages and the routing columns
    item = got["item"]
    assert {"raw_prompt", "data_source", "reward_model", "extra_info", "index"} <= set(item["keys"])
    assert item["raw_prompt"][-1]["role"] == "user" and item["data_source"] == "mbs/math/s"
    assert item["ground_truth"] == str(100 + int(item["extra_info_id"].split("/")[1]))

    # 2. at export's limit verl drops exactly the rows export reported over it
    got = run_script("dataset.py", {"overrides": [*command, f"data.max_prompt_length={LIMIT}"],
                                    "tokenizer": str(tokenizer_dir)}, tmp_path)
    assert got["kept"] == {split: sorted(set(ids) - over) for split, ids in rows.items()}
