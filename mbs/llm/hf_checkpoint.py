"""A GGUF policy as a trainable Hugging Face checkpoint, made once and cached by the file's hash.

Calibration samples a GGUF with llama.cpp (``backend=llamacpp``, the embedded
SmolLM2-135M-Instruct by default); training (TRL, verl) and the ``transformers`` backend need a
Hugging Face checkpoint of *the same weights*. transformers reads a GGUF with ``gguf_file=``
(de-quantised to fp32: 134.5M parameters, about 30 s on 2 cores for the embedded model), but marks
the result as quantised and then refuses to train or save it. :func:`trainable_checkpoint` clears
that mark, writes a plain fp32 safetensors checkpoint with the GGUF's tokenizer and chat template,
and records where it came from in ``mbs_source.json``::

    ckpt = trainable_checkpoint(embedded_model_path(), cache_dir)   # <cache_dir>/hf/<sha256[:16]>/

The folder is named by the GGUF's SHA-256 (:func:`file_sha256`), written to a temporary folder
and renamed into place, so a killed conversion leaves nothing half-written and a second call
(or a second process) reuses the first one's result. Needs ``torch``, ``transformers`` and
``gguf`` (``pip install 'mbs[trl]'``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path

from mbs.errors import require_extra

__all__ = ["SOURCE_FILE", "checkpoint_sha256", "file_sha256", "trainable_checkpoint"]

log = logging.getLogger(__name__)

#: File inside a converted checkpoint naming its source GGUF and that file's SHA-256.
SOURCE_FILE = "mbs_source.json"


def file_sha256(path: str | Path, chunk: int = 1 << 20) -> str:
    """Hex SHA-256 of a file's bytes (read in ``chunk``-byte pieces).

    Raises:
        FileNotFoundError: ``path`` does not exist.
    """
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def checkpoint_sha256(folder: str | Path) -> str:
    """Hex SHA-256 over a Hugging Face checkpoint's content: the weights, config and tokenizer.

    Hashes, in sorted order, the relative path and bytes of every ``*.safetensors``, ``*.bin``,
    ``*.json``, ``*.model``, ``*.txt`` and ``*.jinja`` file directly in ``folder`` (TRL and verl
    checkpoints keep optimizer state in sub-folders or other suffixes, which do not decide
    outputs). Two folders holding the same files have the same hash wherever they are.

    Raises:
        FileNotFoundError: ``folder`` is not a directory or holds no weights file.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder}: not a checkpoint folder")
    suffixes = {".safetensors", ".bin", ".json", ".model", ".txt", ".jinja"}
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix in suffixes and p.name != SOURCE_FILE)
    if not any(p.suffix in (".safetensors", ".bin") for p in files):
        raise FileNotFoundError(f"{folder}: no *.safetensors or *.bin weights in this checkpoint folder")
    h = hashlib.sha256()
    for p in files:
        h.update(p.name.encode() + b"\0")
        h.update(file_sha256(p).encode() + b"\0")
    return h.hexdigest()


def trainable_checkpoint(gguf_path: str | Path, cache_dir: str | Path) -> Path:
    """The fp32 Hugging Face checkpoint of a GGUF model, converted once per file content.

    Args:
        gguf_path: The GGUF file calibration sampled (e.g. :func:`mbs.llm.llamacpp.embedded_model_path`).
        cache_dir: Root of mbs' cache (``paths.cache_dir``); checkpoints go to ``<cache_dir>/hf/<hash>/``.

    Returns:
        The checkpoint folder: ``config.json``, ``model.safetensors`` (fp32), the tokenizer files
        with the GGUF's chat template, ``generation_config.json`` and :data:`SOURCE_FILE`
        (``{"gguf": path, "sha256": hash}``).

    Raises:
        FileNotFoundError: ``gguf_path`` does not exist.
        mbs.errors.MissingExtraError: torch, transformers or gguf is not installed.
    """
    gguf_path = Path(gguf_path).resolve()
    if not gguf_path.is_file():
        raise FileNotFoundError(f"{gguf_path}: GGUF model file not found")
    digest = file_sha256(gguf_path)
    target = Path(cache_dir) / "hf" / digest[:16]
    if (target / SOURCE_FILE).is_file():
        return target
    for module in ("torch", "transformers", "gguf"):
        require_extra(module, "converting a GGUF policy into a trainable checkpoint")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    log.info("converting %s into a trainable fp32 checkpoint (once; cached in %s)", gguf_path.name, target)
    folder, name = str(gguf_path.parent), gguf_path.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    # transformers marks a GGUF-loaded model as quantised (GgufHfQuantizer) and then refuses
    # save_pretrained and training; the tensors are already de-quantised fp32, so the mark is false.
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model, "quantization_method"):
        del model.quantization_method
    if getattr(model.config, "quantization_config", None) is not None:
        del model.config.quantization_config
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        (tmp / SOURCE_FILE).write_text(json.dumps({"gguf": str(gguf_path), "sha256": digest}, indent=2) + "\n")
        try:
            os.rename(tmp, target)
        except OSError:
            if not (target / SOURCE_FILE).is_file():  # not another process's finished copy
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target
