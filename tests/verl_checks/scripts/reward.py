"""Score responses with verl's own reward managers, loading mbs' reward from an mbs-train command.

``python reward.py REQUEST.json`` with ``{"overrides": [...], "tokenizer": DIR, "samples": [...]}``:
the overrides (the dry run's command) are composed on verl's ``ppo_trainer`` config, so
``reward.custom_reward_function`` (path, name, ``reward_kwargs``) is what mbs-train emits. Each
sample ``{"messages", "response", "finish", "data_source", "ground_truth", "extra_info"}`` becomes
one row of a ``DataProto`` as verl's rollout leaves it: the prompt rendered with the chat template
(left-padded), the response tokenized (then EOS when ``finish`` is ``stop``; none when cut off at
``length``) and right-padded, the attention mask over both, and the parquet's columns.

Scored by (each on a fresh copy of the batch):

* ``loop/naive``, ``loop/dapo``: ``verl.experimental.reward_loop.RewardLoopWorker`` (what verl
  0.9.1's trainer runs, as Ray actors) with ``reward.reward_manager.name`` naive / dapo: it loads the
  tokenizer from ``actor_rollout_ref.model.path`` and the manager and reward through
  ``verl.trainer.ppo.reward.load_reward_manager`` / ``get_custom_reward_fn``;
* ``legacy/naive``, ``legacy/dapo``: ``verl.workers.reward_manager``'s batch managers with
  ``compute_score=get_custom_reward_fn(config)``.

Prints one JSON line ``{"decoded": [str], "scores": {manager: [float]}, "extra": {manager: [dict]}}``.
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import numpy as np
import torch
import verl
from hydra import compose, initialize_config_dir
from verl import DataProto
from verl.experimental.reward_loop import RewardLoopWorker
from verl.trainer.ppo.reward import get_custom_reward_fn
from verl.utils import hf_tokenizer
from verl.utils.tokenizer import normalize_token_ids
from verl.workers.reward_manager.dapo import DAPORewardManager as LegacyDAPO
from verl.workers.reward_manager.naive import NaiveRewardManager as LegacyNaive


def batch(samples: list[dict], tokenizer) -> DataProto:
    """The rollout batch verl's reward managers read (see the module docstring)."""
    prompts = [normalize_token_ids(tokenizer.apply_chat_template(s["messages"], add_generation_prompt=True, tokenize=True))
               for s in samples]
    responses = [tokenizer.encode(s["response"], add_special_tokens=False) + ([tokenizer.eos_token_id] if s["finish"] == "stop" else [])
                 for s in samples]
    p_len, r_len, pad = max(map(len, prompts)), max(map(len, responses)), tokenizer.pad_token_id
    p = torch.tensor([[pad] * (p_len - len(x)) + x for x in prompts])
    r = torch.tensor([x + [pad] * (r_len - len(x)) for x in responses])
    mask = torch.tensor([[0] * (p_len - len(x)) + [1] * len(x) + [1] * len(y) + [0] * (r_len - len(y))
                         for x, y in zip(prompts, responses, strict=True)])
    return DataProto.from_dict(
        tensors={"prompts": p, "responses": r, "input_ids": torch.cat([p, r], dim=1), "attention_mask": mask},
        non_tensors={
            "data_source": np.array([s["data_source"] for s in samples], dtype=object),
            "reward_model": np.array([{"style": "rule", "ground_truth": s["ground_truth"]} for s in samples], dtype=object),
            "extra_info": np.array([dict(s["extra_info"]) for s in samples], dtype=object),
            "raw_prompt": np.array([s["messages"] for s in samples], dtype=object),
        },
    )


def main() -> None:
    request = json.loads(Path(sys.argv[1]).read_text())
    tok_dir = request["tokenizer"]
    config_dir = str(Path(verl.__file__).parent / "trainer" / "config")
    configs = {}
    for name in ("naive", "dapo"):
        with initialize_config_dir(config_dir=config_dir, version_base=None):
            configs[name] = compose(config_name="ppo_trainer", overrides=[
                *request["overrides"], f"actor_rollout_ref.model.path={tok_dir}", f"reward.reward_manager.name={name}"])
    tokenizer = hf_tokenizer(tok_dir)
    data = batch(request["samples"], tokenizer)
    response_length = data.batch["responses"].shape[-1]
    valid = data.batch["attention_mask"][:, -response_length:].sum(-1)
    decoded = [tokenizer.decode(data.batch["responses"][i][: valid[i]], skip_special_tokens=True) for i in range(len(data))]
    scores, extra = {}, {}
    for name, cfg in configs.items():
        worker = RewardLoopWorker(cfg)
        outs = worker.loop.run_until_complete(worker.compute_score_batch(copy.deepcopy(data)))
        scores[f"loop/{name}"] = [float(o["reward_score"]) for o in outs]
        extra[f"loop/{name}"] = [{k: o["reward_extra_info"][k] for k in ("acc", "pred", "reason")} for o in outs]
    fn = get_custom_reward_fn(configs["naive"])
    legacy = {
        "legacy/naive": LegacyNaive(tokenizer, 0, compute_score=fn, reward_fn_key=configs["naive"].data.reward_fn_key),
        "legacy/dapo": LegacyDAPO(tokenizer, 0, compute_score=fn, reward_fn_key=configs["naive"].data.reward_fn_key,
                                  max_resp_len=configs["naive"].data.max_response_length),
    }
    for name, manager in legacy.items():
        out = manager(copy.deepcopy(data), return_dict=True)
        tensor = out["reward_tensor"]
        scores[name] = [float(tensor[i, valid[i] - 1]) for i in range(len(data))]
        info = out["reward_extra_info"]
        extra[name] = [{k: info[k][i] for k in ("acc", "pred", "reason")} for i in range(len(data))]
    print(json.dumps({"decoded": decoded, "scores": scores, "extra": extra}, default=str))


if __name__ == "__main__":
    main()
