"""The embedded GGUF as a trainable checkpoint: converted once, cached by hash, weights equal llama.cpp's."""

from __future__ import annotations

import json

import pytest

from mbs.llm.hf_checkpoint import SOURCE_FILE, checkpoint_sha256, file_sha256, trainable_checkpoint
from mbs.training.checkpoints import COMPLETE

torch = pytest.importorskip("torch", reason="needs the trl extra (pip install -e '.[trl]')")
pytest.importorskip("transformers", reason="needs the trl extra")
pytest.importorskip("gguf", reason="needs the trl extra")


def test_file_sha256_and_checkpoint_hash(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "model.safetensors").write_bytes(b"w")
    (tmp_path / "a" / "config.json").write_text("{}")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "model.safetensors").write_bytes(b"w")
    (tmp_path / "b" / "config.json").write_text("{}")
    assert file_sha256(tmp_path / "a" / "config.json") == "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
    assert checkpoint_sha256(tmp_path / "a") == checkpoint_sha256(tmp_path / "b")
    # the run's records (paths, times) differ between two runs that trained the same weights
    for name, text in (("training_args.bin", "out=/runs/a t=18:21"), ("trainer_state.json", '{"log_history": [1]}'),
                       (COMPLETE, '{"step": 2}')):
        (tmp_path / "b" / name).write_text(text)
    assert checkpoint_sha256(tmp_path / "a") == checkpoint_sha256(tmp_path / "b")
    (tmp_path / "b" / "generation_config.json").write_text('{"top_k": 5}')  # decides outputs
    assert checkpoint_sha256(tmp_path / "a") != checkpoint_sha256(tmp_path / "b")
    (tmp_path / "b" / "generation_config.json").unlink()
    (tmp_path / "b" / "model.safetensors").write_bytes(b"x")
    assert checkpoint_sha256(tmp_path / "a") != checkpoint_sha256(tmp_path / "b")
    (tmp_path / "c").mkdir()
    with pytest.raises(FileNotFoundError, match="no \\*.safetensors"):
        checkpoint_sha256(tmp_path / "c")


def test_missing_gguf_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.gguf"):
        trainable_checkpoint(tmp_path / "nope.gguf", tmp_path)


@pytest.mark.slow
def test_embedded_gguf_converts_once_and_trains(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from mbs.llm.llamacpp import embedded_model_path

    gguf = embedded_model_path()
    ckpt = trainable_checkpoint(gguf, tmp_path)
    assert ckpt == tmp_path / "hf" / file_sha256(gguf)[:16]
    assert json.loads((ckpt / SOURCE_FILE).read_text())["sha256"] == file_sha256(gguf)
    mtime = (ckpt / "model.safetensors").stat().st_mtime_ns
    assert trainable_checkpoint(gguf, tmp_path) == ckpt  # cached: not converted again
    assert (ckpt / "model.safetensors").stat().st_mtime_ns == mtime
    assert not [p for p in ckpt.parent.iterdir() if p.name.startswith(".")]  # no temp folder left

    model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(ckpt)
    assert not getattr(model, "is_quantized", False)
    assert sum(p.numel() for p in model.parameters()) == 134_515_008
    assert "<|im_start|>" in tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False)
    # one optimizer step moves the weights (a quantised-marked model refuses to train)
    ids = tok("1 + 1 = 2", return_tensors="pt").input_ids
    before = model.lm_head.weight.detach().clone()
    loss = model(ids, labels=ids).loss
    loss.backward()
    torch.optim.SGD(model.parameters(), lr=1e-2).step()
    assert not torch.equal(before, model.lm_head.weight)
