"""Export run folders for training tests: verl-schema parquet plus a summary with a ``policy`` block."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mbs.export.verl_schema import verl_row, write_parquet
from mbs.training.provenance import PolicyProvenance, policy_block

#: A calibrated vLLM policy (a Hugging Face name: nothing to convert).
HF_POLICY: dict[str, Any] = {
    "source": "calibrate", "run_dir": "/runs/cal", "stage": "calibrate", "trainable": True, "policy": "qwen3-1.7b",
    "backend": "vllm", "model": "Qwen/Qwen3-1.7B", "budget": 256, "n": 8, "temperature": 1.0, "top_p": 1.0,
    "top_k": None, "min_p": None, "reasoning_format": "auto", "chat_template_kwargs": {},
}


def toy_rows(split: str, n: int = 1, source: str = "data") -> list[dict[str, Any]]:
    """``n`` one-line math rows in verl's schema, of the export source ``source``."""
    return [verl_row(
        data_source="mbs/math/toy", messages=[{"role": "user", "content": f"What is 2+{i + 3}?"}], answer_type="math",
        ground_truth=str(5 + i), index=i, split=split, problem_id=f"toy/{split}/{i}", source=source, kind="data", run_dir="",
        parents=[], verifier="math",
    ) for i in range(n)]


def write_export(folder: Path, *policies: dict[str, Any], rows: int = 1, policy: bool = True) -> Path:
    """An export folder: ``train.parquet`` / ``val.parquet`` and ``summary.json`` whose ``policy``
    block records ``policies`` (default: :data:`HF_POLICY`; ``policy=False``: an old export without it).
    The rows are the first policy's source's (as mbs-export writes them)."""
    folder.mkdir(parents=True, exist_ok=True)
    source = str((policies or (HF_POLICY,))[0]["source"]) if policy else "data"
    for split in ("train", "val"):
        write_parquet(toy_rows(split, rows, source), folder / f"{split}.parquet")
    summary: dict[str, Any] = {"schema_version": 1, "stage": "export", "rows": {"train": rows, "val": rows}}
    if policy:
        summary["policy"] = policy_block(PolicyProvenance(**p) for p in (policies or (HF_POLICY,)))
    (folder / "summary.json").write_text(json.dumps(summary))
    return folder
