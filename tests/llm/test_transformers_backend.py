"""backend=transformers: a tiny random Llama checkpoint for the unit tests (seconds), the embedded
model converted from its GGUF for the end-to-end runs of mbs-calibrate and mbs-evaluate (slow)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mbs.errors import ConfigError, InputNotFoundError, MissingExtraError
from mbs.llm import CachedBackend, build_backend
from mbs.llm.base import ChatRequest
from mbs.llm.transformers_backend import TransformersBackend

torch = pytest.importorskip("torch", reason="needs the trl extra (pip install -e '.[trl]')")
pytest.importorskip("transformers", reason="needs the trl extra")

ASK = [{"role": "user", "content": "what is 1+1?"}]
LONG = [{"role": "user", "content": "hello world, think about it: what is the answer to a longer question?"}]
TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if enable_thinking is defined and not enable_thinking %}/no_think{% endif %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@pytest.fixture(scope="session")
def tiny(tmp_path_factory) -> Path:
    """A random 2-layer Llama (hidden size 32) with a 293-token byte-level BPE tokenizer and a
    ChatML template that shows ``enable_thinking=false`` as ``/no_think``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    folder = tmp_path_factory.mktemp("tiny")
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(
        ["what is 1+1? the answer is 2. hello world, think about it."] * 5,
        trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                            initial_alphabet=pre_tokenizers.ByteLevel.alphabet()),
    )
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    tok.chat_template = TEMPLATE
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=512,
                         eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, bos_token_id=None)
    LlamaForCausalLM(config).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def copy_checkpoint(src: Path, dst: Path, generation: dict | None = None) -> Path:
    shutil.copytree(src, dst)
    if generation is not None:
        path = dst / "generation_config.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), **generation}))
    return dst


def test_finish_reasons_and_token_counts(tiny, tmp_path):
    b = TransformersBackend(str(tiny), batch_size=4)
    comps = b.generate([ChatRequest(ASK, n=8, max_tokens=12, seed=5)])[0]
    assert [c.sample_index for c in comps] == list(range(8))
    for c in comps:
        assert c.prompt_tokens == len(b.prompt_tokens(ASK)) and isinstance(c.text, str)
        assert c.completion_tokens == 12 if c.finish_reason == "length" else 1 <= c.completion_tokens <= 12
    assert b.stats.samples == 8 and b.stats.completion_tokens == sum(c.completion_tokens for c in comps)

    greedy = b.generate([ChatRequest(ASK, n=1, max_tokens=12, temperature=0.0)])[0][0]
    first = b._model.generate(torch.tensor([b.prompt_tokens(ASK)]), max_new_tokens=1, do_sample=False)[0, -1].item()
    # the greedy first token made an EOS token: the sample ends there, EOS counted, not in the text
    eos = TransformersBackend(str(copy_checkpoint(tiny, tmp_path / "eos", {"eos_token_id": [first, 2]})))
    c = eos.generate([ChatRequest(ASK, n=1, max_tokens=12, temperature=0.0)])[0][0]
    assert (c.finish_reason, c.completion_tokens, c.text) == ("stop", 1, "")
    # a stop string: the text ends before it, finish reason stop
    stop = next(ch for ch in greedy.text[1:] if ch.isascii() and ch.isalnum())
    c = b.generate([ChatRequest(ASK, n=1, max_tokens=12, temperature=0.0, stop=(stop,))])[0][0]
    assert c.text == greedy.text[: greedy.text.index(stop)] and c.finish_reason == "stop"
    assert c.completion_tokens <= greedy.completion_tokens


def test_sample_i_is_the_same_alone_or_in_any_batch(tiny):
    """Sample i comes from its own generator seeded sample_seed(seed, i): the batch size, the
    other requests in the batch (left padding) and the split of the request do not change it."""
    reqs = [ChatRequest(ASK, n=5, max_tokens=10, seed=3), ChatRequest(LONG, n=3, max_tokens=10, seed=3)]
    batched = TransformersBackend(str(tiny), batch_size=4).generate(reqs)
    single = TransformersBackend(str(tiny), batch_size=1)
    key = lambda c: (c.text, c.completion_tokens, c.finish_reason)
    for req, comps in zip(reqs, batched):
        for c in comps:
            alone = single.generate([ChatRequest(req.messages, n=1, max_tokens=10, seed=3, first_index=c.sample_index)])[0][0]
            assert key(alone) == key(c)
    assert len({c.text for c in batched[0]}) > 1  # distinct samples
    other_seed = single.generate([ChatRequest(ASK, n=5, max_tokens=10, seed=4)])[0]
    assert [c.text for c in other_seed] != [c.text for c in batched[0]]


def test_model_id_from_content_not_path(tiny, tmp_path):
    from safetensors.torch import load_file, save_file

    original = TransformersBackend(str(tiny))
    copied = TransformersBackend(str(copy_checkpoint(tiny, tmp_path / "copy")))
    assert original.model_id == copied.model_id and original.model_id.startswith("hf@sha256:")
    weights = load_file(tmp_path / "copy" / "model.safetensors")
    weights["lm_head.weight"] = weights["lm_head.weight"] + 1e-3
    save_file(weights, tmp_path / "copy" / "model.safetensors", metadata={"format": "pt"})
    assert TransformersBackend(str(tmp_path / "copy")).model_id != original.model_id  # retrained at the same path


def test_copied_checkpoint_is_served_from_the_cache(tiny, tmp_path):
    req = ChatRequest(ASK, n=3, max_tokens=8, seed=1)
    first = CachedBackend(TransformersBackend(str(tiny), batch_size=2), tmp_path / "cache")
    drawn = first.generate([req])[0]
    first.close()
    again = CachedBackend(TransformersBackend(str(copy_checkpoint(tiny, tmp_path / "copy"))), tmp_path / "cache")
    hits = again.generate([req])[0]
    assert again.backend.stats.calls == 0 and again.backend._model is None  # never loaded
    assert [c.text for c in hits] == [c.text for c in drawn] and all(c.cached for c in hits)
    # top_k is not a request field: it is in the cache key
    other = CachedBackend(TransformersBackend(str(tiny), top_k=5), tmp_path / "cache")
    other.generate([req])
    assert other.backend.stats.samples == 3


def test_chat_template_kwargs_reach_the_template(tiny):
    plain = TransformersBackend(str(tiny))
    off = TransformersBackend(str(tiny), reasoning={"format": "think", "chat_template_kwargs": {"enable_thinking": False}})

    def decode(b: TransformersBackend) -> str:
        ids = b.prompt_tokens(ASK)
        return b._tokenizer.decode(ids)

    assert "/no_think" in decode(off) and "/no_think" not in decode(plain)
    assert decode(plain).endswith("<|im_start|>assistant\n")
    assert off.cache_params["reasoning"]["chat_template_kwargs"] == {"enable_thinking": False}
    assert "reasoning" not in plain.cache_params
    c = off.generate([ChatRequest(ASK, n=1, max_tokens=6)])[0][0]
    assert c.answered and c.reasoning == ""  # no <think>: all answer (mbs.reasoning's split)


def test_bad_settings_name_the_key(tiny, tmp_path, monkeypatch):
    with pytest.raises(InputNotFoundError, match="backend.model=.*nowhere"):
        TransformersBackend(str(tmp_path / "nowhere"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputNotFoundError, match="backend.model=.*no config.json"):
        TransformersBackend(str(tmp_path / "empty"))
    with pytest.raises(ConfigError, match="backend.device='tpu'"):
        TransformersBackend(str(tiny), device="tpu")
    with pytest.raises(ConfigError, match="backend.dtype"):
        TransformersBackend(str(tiny), dtype="int8")
    with pytest.raises(ConfigError, match="backend.cache_dir is null"):
        _ = TransformersBackend(None, cache_dir=None).folder
    import mbs.errors

    real = mbs.errors.importlib.util.find_spec
    monkeypatch.setattr(mbs.errors.importlib.util, "find_spec", lambda m, *a: None if m == "transformers" else real(m, *a))
    with pytest.raises(MissingExtraError, match=r"backend=transformers needs transformers.*\.\[trl\]"):
        TransformersBackend(str(tiny)).generate([ChatRequest(ASK)])


def test_built_from_config(make_cfg, tiny, models_dir):
    cfg = make_cfg("calibrate", ["backend=transformers", f"backend.model={tiny}", "backend.batch_size=2"])
    backend = build_backend(cfg.backend, cfg.paths.cache_dir)
    assert isinstance(backend.backend, TransformersBackend) and backend.name == "transformers"
    assert backend.backend.cache_dir == str(models_dir) and cfg.backend.label == str(tiny)  # paths.models_dir
    assert make_cfg("calibrate", ["backend=transformers"]).backend.model == "embedded"


# -- the embedded model, converted once per session: mbs-calibrate and mbs-evaluate ----------


@pytest.fixture(scope="session")
def embedded_ckpt(tmp_path_factory) -> Path:
    pytest.importorskip("gguf", reason="needs the trl extra")
    from mbs.llm.hf_checkpoint import trainable_checkpoint
    from mbs.llm.llamacpp import embedded_model_path

    return trainable_checkpoint(embedded_model_path(), tmp_path_factory.mktemp("hf_cache"))


def stage(name: str, run_dir: Path, cache: Path, *args: str) -> dict:
    """Run ``mbs-<name>`` in a subprocess (as the console script does); returns its manifest."""
    subprocess.run(
        [sys.executable, "-c", f"from mbs.cli import {name}; {name}()", *args, "verifier.workers=1",
         f"hydra.run.dir={run_dir}", f"paths.cache_dir={cache}", f"paths.root={run_dir.parent}"],
        check=True, capture_output=True, timeout=3600,
    )
    return json.loads((run_dir / "manifest.json").read_text())


@pytest.mark.slow
def test_calibrate_a_checkpoint_then_served_from_the_cache(embedded_ckpt, tmp_path):
    """`mbs-calibrate backend=transformers backend.model=<ckpt>` on 2 CHAMP problems, N=2, L=24."""
    from mbs.io import read_records
    from mbs.records import Rollout

    args = ["backend=transformers", f"backend.model={embedded_ckpt}", "data.limit=2", "calibrate.n=2",
            "calibrate.budgets=[24]", "calibrate.figures=false"]
    stats = stage("calibrate", tmp_path / "first", tmp_path / "cache", *args)["backends"][str(embedded_ckpt)]
    assert stats["samples"] == 4 and stats["model_id"].startswith("hf@sha256:")
    rollouts = read_records(tmp_path / "first", "rollouts", Rollout)
    assert len(rollouts) == 4 and all(r.reward in (0.0, 1.0) and r.completion_tokens <= 24 for r in rollouts)
    again = stage("calibrate", tmp_path / "second", tmp_path / "cache", *args)["backends"][str(embedded_ckpt)]
    assert (again["calls"], again["samples"], again["cache_hits"]) == (0, 0, 4)
    assert sorted((r.key, r.text) for r in read_records(tmp_path / "second", "rollouts", Rollout)) == sorted(
        (r.key, r.text) for r in rollouts
    )


@pytest.mark.slow
def test_evaluate_a_checkpoint_then_served_from_the_cache(embedded_ckpt, tmp_path):
    """`mbs-evaluate backend=transformers backend.model=<ckpt>` on 2 CHAMP held-out problems, k=2, L=32."""
    from mbs.io import read_records, read_summary
    from mbs.records import Rollout

    args = ["backend=transformers", f"backend.model={embedded_ckpt}", "data.limit=2", "eval.k=2",
            "eval.budgets=[32]", "eval.figures=false"]
    stats = stage("evaluate", tmp_path / "first", tmp_path / "cache", *args)["backends"]
    assert sum(s["samples"] for s in stats.values()) == 4
    s = read_summary(tmp_path / "first")
    cell = s["results"][str(embedded_ckpt)]["champ_heldout"]["32"]
    assert cell["samples"] == 2 and 0.0 <= cell["avg"] <= 1.0
    assert len(read_records(tmp_path / "first", "rollouts", Rollout)) == 4
    again = stage("evaluate", tmp_path / "second", tmp_path / "cache", *args)["backends"]
    assert sum(s["samples"] for s in again.values()) == 0 and sum(s["calls"] for s in again.values()) == 0
    assert sum(s["cache_hits"] for s in again.values()) == 4
