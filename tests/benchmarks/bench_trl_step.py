"""Where a thesis training step's time goes, and how fast its matrix multiplies run.

    python tests/benchmarks/bench_trl_step.py [--steps 3] [--prompts-per-step 1] [--n 4] [--budget 48] [--out DIR]

Builds what ``mbs-thesis`` trains (issue 43): the embedded SmolLM2-135M-Instruct calibrated by
llama.cpp on one-digit ``chain_sum`` problems at N rollouts and budget L, exported, then trained by
``mbs-train train.engine=trl`` (TRL's ``GRPOTrainer``, full fine-tune in fp32 on the CPU) for a few
steps in this process. TRL's own methods are timed in place (wrapped, not changed):

* generation: ``GRPOTrainer._generate`` (transformers' ``generate``, N completions of the step's prompts);
* old/reference log-probs: ``_get_per_token_logps_and_entropies`` called while scoring the completions;
* loss forward: the same function called from ``_compute_loss`` (the policy's forward with grad);
* backward and update: the rest of the step (``training_step`` minus its forward, plus the optimizer).

Each phase's model FLOPs (2 x parameters x tokens forward, twice that backward, the attention
left out) per second are printed against ``torch.matmul``'s rate at the model's own shapes
(tokens x hidden @ hidden x intermediate, fp32), measured in the same run: a phase far below it
is bound by something other than arithmetic (Python, small kernels, memory). The step 1 warm-up is
reported apart. Run it on a quiet machine; the 1-minute load average is printed beside the numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
ONE_DIGIT = "+data.levels={chain_sum: {1digit: {min_digits: 1, max_digits: 1, min_terms: 2, max_terms: 3}}}"


class Phases:
    """Wall seconds and tokens per phase and per step, filled by the wrappers below."""

    def __init__(self) -> None:
        self.seconds: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        self.tokens: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        self.step = 0
        self.in_loss = False

    def add(self, phase: str, seconds: float, tokens: int = 0) -> None:
        self.seconds[self.step][phase] += seconds
        self.tokens[self.step][phase] += tokens


def instrument(phases: Phases) -> None:
    """Wrap TRL's ``GRPOTrainer`` methods with timers (this process only)."""
    from trl import GRPOTrainer

    generate, logps = GRPOTrainer._generate, GRPOTrainer._get_per_token_logps_and_entropies
    compute_loss, training_step = GRPOTrainer._compute_loss, GRPOTrainer.training_step

    def timed_generate(self: Any, prompts: Any) -> Any:
        t0 = time.perf_counter()
        out = generate(self, prompts)
        completion_ids = out[1] if isinstance(out, tuple) and len(out) > 1 else []
        phases.add("generation", time.perf_counter() - t0, sum(len(c) for c in completion_ids))
        return out

    def timed_logps(self: Any, model: Any, input_ids: Any, *args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        out = logps(self, model, input_ids, *args, **kwargs)
        phases.add("loss_forward" if phases.in_loss else "old_ref_logps", time.perf_counter() - t0, int(input_ids.numel()))
        return out

    def timed_loss(self: Any, model: Any, inputs: Any) -> Any:
        phases.in_loss = True
        try:
            return compute_loss(self, model, inputs)
        finally:
            phases.in_loss = False

    def timed_step(self: Any, model: Any, inputs: Any, num_items_in_batch: Any = None) -> Any:
        t0 = time.perf_counter()
        out = training_step(self, model, inputs, num_items_in_batch)
        phases.add("training_step", time.perf_counter() - t0)
        return out

    GRPOTrainer._generate = timed_generate
    GRPOTrainer._get_per_token_logps_and_entropies = timed_logps
    GRPOTrainer._compute_loss = timed_loss
    GRPOTrainer.training_step = timed_step


def matmul_rate(tokens: int, hidden: int, inner: int, repeats: int = 20) -> float:
    """fp32 ``torch.matmul`` FLOP/s of (tokens x hidden) @ (hidden x inner), best of ``repeats``."""
    import torch

    a, b = torch.randn(tokens, hidden), torch.randn(hidden, inner)
    torch.matmul(a, b)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        torch.matmul(a, b)
        best = min(best, time.perf_counter() - t0)
    return 2.0 * tokens * hidden * inner / best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--prompts-per-step", type=int, default=1)
    ap.add_argument("--n", type=int, default=4)
    ap.add_argument("--budget", type=int, default=48)
    ap.add_argument("--out", default=None, help="work folder (default: a temporary one)")
    args = ap.parse_args()

    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from transformers import TrainerCallback

    from mbs.cli import config_dir
    from mbs.io import read_summary
    from mbs.stages import calibrate, export, train

    base = Path(args.out or tempfile.mkdtemp(prefix="bench_trl_"))

    def cfg(name: str, out: str, *more: str) -> Any:
        GlobalHydra.instance().clear()
        with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
            return compose(name, [f"paths.root={base}", f"paths.cache_dir={base / 'cache'}", f"out_dir={base / out}", *more])

    cal = calibrate.run(cfg("calibrate", "cal", "data=reasoning_gym", "data.size=12", "~data.levels", ONE_DIGIT,
                            f"calibrate.n={args.n}", f"calibrate.budgets=[{args.budget}]", "calibrate.temperature=0.6",
                            "calibrate.figures=false"))
    data = export.run(cfg("export", "export", f"export.runs=[{cal}]", "export.decontam.enabled=false",
                          "export.split.val_fraction=0.1", "export.select=all"))

    phases = Phases()
    instrument(phases)
    walls: dict[int, float] = {}

    class StepClock(TrainerCallback):
        def on_step_begin(self, a: Any, state: Any, control: Any, **kw: Any) -> None:
            phases.step = state.global_step + 1
            self.t0 = time.perf_counter()

        def on_step_end(self, a: Any, state: Any, control: Any, **kw: Any) -> None:
            walls[state.global_step] = time.perf_counter() - self.t0

    from trl import GRPOTrainer

    init = GRPOTrainer.__init__

    def init_with_clock(self: Any, *a: Any, **kw: Any) -> None:
        init(self, *a, **kw)
        self.add_callback(StepClock())

    GRPOTrainer.__init__ = init_with_clock
    out = train.run(cfg("train", "train", "train.engine=trl", f"train.data_dir={data}", f"train.trl.max_steps={args.steps}",
                        f"train.trl.prompts_per_step={args.prompts_per_step}", "train.trl.progress=false",
                        "train.trl.save_steps=1000", "train.trl.learning_rate=1e-6"))
    policy = read_summary(out)["policy"]

    import torch
    from transformers import AutoConfig

    mc = AutoConfig.from_pretrained(policy["model"])
    params = sum(p.numel() for p in torch.nn.Module.parameters(_load(policy["model"])))
    tokens_fwd = args.prompts_per_step * args.n * (args.budget + 64)
    peak = matmul_rate(tokens_fwd, mc.hidden_size, mc.intermediate_size)
    print(f"model {policy['model']} ({params / 1e6:.1f} M parameters), torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads; load {os.getloadavg()[0]:.2f}")
    print(f"torch.matmul fp32 ({tokens_fwd} x {mc.hidden_size} @ {mc.hidden_size} x {mc.intermediate_size}): "
          f"{peak / 1e9:.1f} GFLOP/s")
    rows = []
    for step in sorted(walls):
        sec, tok = phases.seconds[step], phases.tokens[step]
        fwd_in_step = sec["loss_forward"]
        backward = max(walls[step] - sec["generation"] - sec["old_ref_logps"] - fwd_in_step, 0.0)
        split = {"generation": sec["generation"], "old_ref_logps": sec["old_ref_logps"], "loss_forward": fwd_in_step,
                 "backward_and_update": backward}
        flops = {"generation": 2 * params * tok["generation"], "old_ref_logps": 2 * params * tok["old_ref_logps"],
                 "loss_forward": 2 * params * tok["loss_forward"], "backward_and_update": 4 * params * tok["loss_forward"]}
        rows.append({"step": step, "wall_s": walls[step], **{f"{k}_s": v for k, v in split.items()},
                     **{f"{k}_of_matmul": (flops[k] / split[k] / peak if split[k] else None) for k in split}})
        share = "  ".join(f"{k} {v:.2f}s ({v / walls[step]:.0%}, {flops[k] / v / 1e9 if v else 0:.1f} GFLOP/s = "
                          f"{(flops[k] / v / peak) if v else 0:.2f} of matmul)" for k, v in split.items())
        print(f"step {step}{' (warm-up)' if step == min(walls) else ''}: {walls[step]:.2f}s  {share}")
    (base / "bench_trl_step.json").write_text(json.dumps({"matmul_flops": peak, "params": params, "steps": rows}, indent=1))
    print(f"written {base / 'bench_trl_step.json'}")


def _load(path: str) -> Any:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path)


if __name__ == "__main__":
    main()
