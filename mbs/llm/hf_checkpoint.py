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

import numpy as np

from mbs.errors import require_extra

__all__ = ["RUN_RECORDS", "SOURCE_FILE", "checkpoint_sha256", "dequantized_gguf", "eog_token_ids", "file_sha256", "trainable_checkpoint"]

log = logging.getLogger(__name__)

#: File inside a converted checkpoint naming its source GGUF and that file's SHA-256.
SOURCE_FILE = "mbs_source.json"
#: Files of a checkpoint folder that record the run, not the model: the source record above,
#: the Trainer's arguments (output paths, a logging folder named by the start time) and state
#: (log history, timings), and mbs's sentinel of a complete checkpoint
#: (:data:`mbs.training.checkpoints.COMPLETE`). Two runs that train the same weights differ here.
RUN_RECORDS = frozenset({SOURCE_FILE, "training_args.bin", "trainer_state.json", "mbs_complete.json"})


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
    ``*.json``, ``*.model``, ``*.txt`` and ``*.jinja`` file directly in ``folder`` except the
    run's records (:data:`RUN_RECORDS`: they hold paths and times; TRL and verl checkpoints keep
    optimizer state in sub-folders or other suffixes, which do not decide outputs either). Two
    folders holding the same model have the same hash wherever and whenever it was trained.

    Raises:
        FileNotFoundError: ``folder`` is not a directory or holds no weights file.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder}: not a checkpoint folder")
    suffixes = {".safetensors", ".bin", ".json", ".model", ".txt", ".jinja"}
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix in suffixes and p.name not in RUN_RECORDS)
    if not any(p.suffix in (".safetensors", ".bin") for p in files):
        raise FileNotFoundError(f"{folder}: no *.safetensors or *.bin weights in this checkpoint folder")
    h = hashlib.sha256()
    for p in files:
        h.update(p.name.encode() + b"\0")
        h.update(file_sha256(p).encode() + b"\0")
    return h.hexdigest()


def dequantized_gguf(gguf_path: str | Path, cache_dir: str | Path) -> Path:
    """The GGUF with every tensor de-quantised to F32, written once per file content.

    Metadata (architecture, tokenizer, chat template) is copied as it is, except
    ``general.file_type`` (all F32). Each quantised or F16 tensor becomes
    ``gguf.quants.dequantize`` of its blocks, the function transformers' GGUF loader calls, so
    llama.cpp on this file and :func:`trainable_checkpoint` of the source hold the same numbers
    (``tests/llm/test_one_policy.py`` compares them). About 4 bytes a parameter: 540 MB for the
    embedded SmolLM2-135M-Instruct (its Q4_1 file: 92 MB), written in a few seconds.

    Args:
        gguf_path: The GGUF file (any quantisation; an all-F32 file is returned as it is).
        cache_dir: Where derived model files go (``paths.models_dir``); the file goes to
            ``<cache_dir>/gguf/<sha256[:16]>/<stem>.F32.gguf``, beside a :data:`SOURCE_FILE`.

    Returns:
        The F32 file's path.

    Raises:
        FileNotFoundError: ``gguf_path`` does not exist.
        mbs.errors.MissingExtraError: ``gguf`` is not installed.
    """
    gguf_path = Path(gguf_path).resolve()
    if not gguf_path.is_file():
        raise FileNotFoundError(f"{gguf_path}: GGUF model file not found")
    digest = file_sha256(gguf_path)
    folder = Path(cache_dir) / "gguf" / digest[:16]
    target = folder / f"{gguf_path.stem}.F32.gguf"
    if (folder / SOURCE_FILE).is_file() and target.is_file():
        return target
    require_extra("gguf", "running a GGUF policy's fp32 de-quantisation (backend.weights=f32)")
    import gguf  # lazy: an optional extra (checked just above)

    reader = gguf.GGUFReader(gguf_path)
    kept = (gguf.GGMLQuantizationType.F32,)
    if all(t.tensor_type in kept for t in reader.tensors):
        return gguf_path
    log.info("writing the fp32 de-quantisation of %s (once; cached in %s)", gguf_path.name, folder)
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{target.name}.{os.getpid()}.tmp"
    try:
        writer = gguf.GGUFWriter(tmp, str(reader.fields[gguf.Keys.General.ARCHITECTURE].contents()))
        for fld in reader.fields.values():
            if fld.name == gguf.Keys.General.ARCHITECTURE or fld.name.startswith("GGUF."):
                continue  # written by GGUFWriter itself
            if fld.name == gguf.Keys.General.FILE_TYPE:
                writer.add_key_value(fld.name, int(gguf.LlamaFileType.ALL_F32), gguf.GGUFValueType.UINT32)
                continue
            vtype = fld.types[0]
            sub = fld.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
            writer.add_key_value(fld.name, fld.contents(), vtype, sub_type=sub)
        for t in reader.tensors:
            shape = tuple(int(x) for x in reversed(t.shape))  # GGUF lists ne0 first, numpy the slowest axis first
            data = np.asarray(t.data) if t.tensor_type in kept else gguf.quants.dequantize(t.data, t.tensor_type)
            writer.add_tensor(t.name, np.ascontiguousarray(data, dtype=np.float32).reshape(shape))
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    (folder / SOURCE_FILE).write_text(json.dumps({"gguf": str(gguf_path), "sha256": digest, "weights": "f32"}, indent=2) + "\n")
    return target


def eog_token_ids(gguf_path: str | Path) -> list[int]:
    """The token ids llama.cpp ends a sample on (``llama_vocab_is_eog``), read from the GGUF's vocabulary.

    llama.cpp counts more tokens as end-of-generation than the GGUF's ``eos_token_id``: for the
    embedded SmolLM2-135M-Instruct 0, 2 and 4 (``<|endoftext|>``, ``<|im_end|>``, ``<reponame>``)
    against the converted tokenizer's 2 alone.

    Returns:
        The ids in increasing order; empty when llama-cpp-python is not installed.
    """
    try:
        import llama_cpp  # lazy: llama-cpp-python is an optional extra
    except ImportError:
        return []
    llm = llama_cpp.Llama(model_path=str(gguf_path), vocab_only=True, verbose=False)
    try:
        vocab = llm._model.vocab
        return [i for i in range(int(llama_cpp.llama_vocab_n_tokens(vocab))) if llama_cpp.llama_vocab_is_eog(vocab, i)]
    finally:
        llm.close()


def trainable_checkpoint(gguf_path: str | Path, cache_dir: str | Path) -> Path:
    """The fp32 Hugging Face checkpoint of a GGUF model, converted once per file content.

    Args:
        gguf_path: The GGUF file calibration sampled (e.g. :func:`mbs.llm.llamacpp.embedded_model_path`).
        cache_dir: Where derived model files go (``paths.models_dir``); checkpoints go to ``<cache_dir>/hf/<hash>/``.

    Returns:
        The checkpoint folder: ``config.json``, ``model.safetensors`` (fp32), the tokenizer files
        with the GGUF's chat template, ``generation_config.json`` (its ``eos_token_id``: the tokens
        llama.cpp ends a sample on, :func:`eog_token_ids`) and :data:`SOURCE_FILE`
        (``{"gguf": path, "sha256": hash, "eos_token_ids": [...]}``).

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
        if "eos_token_ids" in json.loads((target / SOURCE_FILE).read_text()):
            return target
        log.info("%s was converted before its stop tokens were llama.cpp's: converting it again", target)
    for module in ("torch", "transformers", "gguf"):
        require_extra(module, "converting a GGUF policy into a trainable checkpoint")
    # lazy: torch/transformers are optional extras
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
    # one stop set: llama.cpp ends a sample on every end-of-generation token of the vocabulary, and
    # TRL and the transformers backend stop on the generation config's eos_token_id (TRL also masks them)
    eos = eog_token_ids(gguf_path) or [int(tokenizer.eos_token_id)]
    model.generation_config.eos_token_id = eos
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        (tmp / SOURCE_FILE).write_text(json.dumps({"gguf": str(gguf_path), "sha256": digest, "eos_token_ids": eos}, indent=2) + "\n")
        if target.is_dir() and "eos_token_ids" not in (target / SOURCE_FILE).read_text():
            shutil.rmtree(target)  # the stale conversion (see above)
        try:
            os.rename(tmp, target)
        except OSError:
            if not (target / SOURCE_FILE).is_file():  # not another process's finished copy
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target
