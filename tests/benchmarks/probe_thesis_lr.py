"""Learning-rate probe of the thesis experiment: does a few GRPO steps' update move the policy, and which way?

Run (after ``mbs-train train.engine=trl`` on a thesis set, e.g. ``RUN/runs/goldilocks/seed0``):
``python tests/benchmarks/probe_thesis_lr.py TRAIN_RUN_DIR`` prints, over the completions the run
trained on (``completions.jsonl``), the mean per-token log-probability change trained - base of
rewarded and unrewarded completions, and the mean absolute change. GRPO with a learning rate that
moves the policy raises the first and lowers the second; a learning rate that changes nothing
gives changes near 0 (docs/thesis.md quotes the numbers of the chosen rate).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pyarrow.parquet as pq
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer


def token_logprobs(model, tok, prompt_ids: list[int], text: str) -> torch.Tensor:
    comp = tok(text, add_special_tokens=False)["input_ids"]
    ids = torch.tensor([prompt_ids + comp])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt_ids) - 1 : -1]
    return torch.log_softmax(logits.float(), -1).gather(1, torch.tensor(comp)[:, None])[:, 0]


def main(run_dir: str) -> None:
    run = Path(run_dir)
    summary = json.loads((run / "summary.json").read_text())
    base_dir = summary["policy"]["model"]
    cfg_text = (run / "config.yaml").read_text()
    data = Path(next(line.split(":", 1)[1].strip() for line in cfg_text.splitlines() if line.strip().startswith("data_dir:")))
    rows = {r["extra_info"]["id"]: r for r in pq.read_table(data / "train.parquet").to_pylist()}
    tok = AutoTokenizer.from_pretrained(base_dir)
    base = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32).eval()
    trained = AutoModelForCausalLM.from_pretrained(run / "final", dtype=torch.float32).eval()
    kwargs = summary["policy"].get("chat_template_kwargs") or {}
    diffs = {1.0: [], 0.0: []}
    absd = []
    for line in (run / "completions.jsonl").read_text().splitlines():
        c = json.loads(line)
        msgs = rows[c["id"]]["prompt"]
        p_ids = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True, **kwargs)
        if hasattr(p_ids, "input_ids"):
            p_ids = p_ids["input_ids"]
        if not c["completion"]:
            continue
        d = token_logprobs(trained, tok, list(p_ids), c["completion"]) - token_logprobs(base, tok, list(p_ids), c["completion"])
        diffs[float(c["score"])].append(float(d.mean()))
        absd.append(float(d.abs().mean()))
    for score, xs in diffs.items():
        if xs:
            print(f"reward {score:.0f}: {len(xs)} completions, mean per-token log-prob change trained - base {sum(xs) / len(xs):+.4f}")
    print(f"mean |per-token log-prob change| {sum(absd) / max(1, len(absd)):.4f} over {len(absd)} completions")


if __name__ == "__main__":
    main(sys.argv[1])
