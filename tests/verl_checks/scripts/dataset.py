"""Load exported parquet files with verl's own ``RLHFDataset``, configured by an mbs-train command.

``python dataset.py REQUEST.json`` with ``{"overrides": [...], "tokenizer": DIR}``: the overrides
(the dry run's command, plus any the test adds) are composed on verl's ``ppo_trainer`` config; the
datasets are built as verl's trainer builds them (``create_rl_dataset(config.data.train_files,
config.data, tokenizer, processor=None)``, the same for ``val_files``) with ``hf_tokenizer(DIR)``.
Prints one JSON line::

    {"kept": {"train": [ids], "val": [ids]}, "rows": {"train": n, "val": n},
     "tokens": {id: prompt tokens as verl's filter counts them}, "item": {first training item}}
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import datasets
import verl
from hydra import compose, initialize_config_dir
from verl.trainer.ppo.utils import create_rl_dataset
from verl.utils import hf_tokenizer
from verl.utils.tokenizer import normalize_token_ids


def main() -> None:
    request = json.loads(Path(sys.argv[1]).read_text())
    with initialize_config_dir(config_dir=str(Path(verl.__file__).parent / "trainer" / "config"), version_base=None):
        cfg = compose(config_name="ppo_trainer", overrides=list(request["overrides"]))
    tokenizer = hf_tokenizer(request["tokenizer"])
    kwargs = dict(cfg.data.get("apply_chat_template_kwargs") or {})
    out = {"kept": {}, "rows": {}, "tokens": {}, "max_prompt_length": cfg.data.max_prompt_length,
           "filter_overlong_prompts": cfg.data.filter_overlong_prompts}
    for split, files in (("train", cfg.data.train_files), ("val", cfg.data.val_files)):
        ds = create_rl_dataset(files, cfg.data, tokenizer, None, is_train=split == "train")
        out["kept"][split] = sorted(ds.dataframe[i]["extra_info"]["id"] for i in range(len(ds)))
        raw = datasets.load_dataset("parquet", data_files=str(files))["train"]
        out["rows"][split] = len(raw)
        for row in raw:  # the count verl's doc2len makes (its filter keeps rows with count <= max_prompt_length)
            ids = tokenizer.apply_chat_template(row[cfg.data.prompt_key], add_generation_prompt=True, tokenize=True, **kwargs)
            out["tokens"][row["extra_info"]["id"]] = len(normalize_token_ids(ids))
        if split == "train" and len(ds):
            item = ds[0]
            out["item"] = {"keys": sorted(item), "raw_prompt": list(item["raw_prompt"]), "data_source": item["data_source"],
                           "ground_truth": item["reward_model"]["ground_truth"], "index": int(item["index"]),
                           "extra_info_id": item["extra_info"]["id"]}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
