"""A tiny random-initialised causal LM and a four-letter export, so that a real TRL GRPO step
takes well under a second on the CPU (no download: the tokenizer is built here).

The vocabulary is the option letters ``A``-``D``, end of sequence, padding, unknown and the two
chat-role tokens; every other character of a prompt is ``<unk>``. With ``L = 1`` a completion is
one token and the ``mcq`` verifier grades it (``"B"`` against gold ``B`` is 1), so a group of 8
usually holds both rewards: GRPO advantages are nonzero and the weights move.
"""

from __future__ import annotations

import json
from pathlib import Path

LETTERS = "ABCD"
SPECIALS = ["<pad>", "</s>", "<unk>", "<|user|>", "<|assistant|>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def tiny_model(folder: Path, seed: int = 0) -> Path:
    """Save a 2-layer Llama (hidden 16, vocab 9) and its tokenizer into ``folder``."""
    import torch
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate([*SPECIALS, *LETTERS])}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", eos_token="</s>", unk_token="<unk>",
        additional_special_tokens=["<|user|>", "<|assistant|>"],
    )
    fast.chat_template = CHAT_TEMPLATE
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(vocab), hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=2, max_position_embeddings=256, pad_token_id=0, eos_token_id=1, bos_token_id=None,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    fast.save_pretrained(folder)
    return folder


def letter_export(folder: Path, rows: int = 8, unknown_verifier: int | None = None) -> Path:
    """``train.parquet`` and ``val.parquet`` of ``rows`` + 2 four-option questions (answers cycle A-D).

    Args:
        unknown_verifier: The row whose data source and verifier name no verifier (its reward raises).
    """
    from mbs.export.verl_schema import verl_row, write_parquet

    def row(i: int, split: str) -> dict:
        gold = LETTERS[i % 4]
        bad = i == unknown_verifier
        return verl_row(
            data_source="mbs/nosuch/tiny" if bad else "mbs/mcq/tiny", messages=[{"role": "user", "content": f"Q{i}: pick {gold}"}],
            answer_type="mcq", ground_truth=gold, index=i, split=split, problem_id=f"q{i}", source="tiny",
            kind="seed", run_dir=str(folder), parents=[], verifier="nosuch" if bad else "mcq",
        )

    write_parquet([row(i, "train") for i in range(rows)], folder / "train.parquet")
    write_parquet([row(rows + i, "val") for i in range(2)], folder / "val.parquet")
    # an export run folder that records no calibrated policy: training names its model (train.override=[model])
    (folder / "summary.json").write_text(json.dumps({"stage": "export"}))
    return folder


def train_overrides(model: Path, export: Path, steps: int, *more: str) -> list[str]:
    """``mbs-train`` overrides training the tiny model with TRL: N=8, L=1, 2 prompts a step."""
    return [
        "train.engine=trl", f"train.data_dir={export}", f"train.model={model}", "train.override=[model]",
        "train.uncalibrated.group_size=8", "train.uncalibrated.max_completion_length=1",
        "train.uncalibrated.reasoning_format=none", f"train.trl.max_steps={steps}", "train.trl.prompts_per_step=2",
        "train.trl.learning_rate=0.05", "train.trl.save_steps=1", "train.trl.save_total_limit=null",
        "train.trl.progress=false", "train.env.MBS_REWARD_WORKERS=0", *more,
    ]
