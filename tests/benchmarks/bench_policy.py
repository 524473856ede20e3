"""One policy, measured (issue 47): the same problems calibrated by llama.cpp and by the evaluation
engine, pass rates compared with what N-rollout sampling noise alone predicts.

    python tests/benchmarks/bench_policy.py [--problems 40] [--n 16] [--budget 48] [--temperature 0.6]
                                            [--engines llamacpp,transformers] [--out DIR] [--quick]

Both engines calibrate the thesis's Reasoning Gym corpus (``chain_sum`` with one-digit operands,
2 and 3 terms: ``thesis.data``), ``--problems`` problems, N = ``--n`` rollouts each at budget L =
``--budget`` and temperature ``--temperature`` with top-k 40, top-p 1 and min-p 0.05 (llama.cpp's
defaults, which ``mbs-train`` adopts), early stopping off, with ``mbs-calibrate``'s own stage
function (a cold LLM cache in ``--out``):

* ``llamacpp``: the default engine, ``backend=llamacpp`` (the GGUF's fp32 de-quantisation,
  temperature first); add ``llamacpp_q4`` for the engine before issue 47's weights
  (``backend.weights=file``: the Q4_1 file as stored);
* ``transformers``: the evaluation and re-calibration engine, ``backend=transformers`` on the
  converted checkpoint (Hugging Face's sampling order, TRL's), ``top_k=40 min_p=0.05``.

Printed, for each engine against the first: the mean pass rates, the paired difference of pass
rates over problems with its 95% t interval and a sign-flip permutation p (problems are the unit:
each problem's two pass rates are paired), the share of problems in the same band (``solved_all``,
``goldilocks``, ``failed_all``), and beside each what two independent N-rollout calibrations of
one policy give (a parametric bootstrap: each problem's pooled pass rate drawn twice, 4,000 draws):
the 95% range of the mean difference and of the same-band share. Engines that sample one policy
land inside those ranges.

Each engine's samples are seeded per problem and sample index alike, so the two runs are paired
draws of the same random streams; different engines still turn the same stream into other
tokens once their logits differ in the last bits.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf, open_dict

from mbs.cli import config_dir
from mbs.io import read_records
from mbs.records import Calibration
from mbs.stages import calibrate

ENGINES = {
    "llamacpp": ["backend=llamacpp"],
    "llamacpp_q4": ["backend=llamacpp", "backend.weights=file"],
    "transformers": ["backend=transformers", "backend.top_k=40", "backend.min_p=0.05"],
}


def band(successes: int, n: int) -> str:
    return "failed_all" if successes == 0 else "solved_all" if successes == n else "goldilocks"


def calibrate_with(engine: str, args: argparse.Namespace, out: Path) -> dict[str, Calibration]:
    """Run the calibration stage with ``engine`` and return its calibrations by problem id."""
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
        thesis = compose(config_name="thesis", overrides=[f"thesis.data.size={args.problems}"])
        cfg = compose(config_name="calibrate", overrides=[
            f"paths.root={out}", f"paths.cache_dir={out / 'cache'}", f"out_dir={out / engine}",
            f"calibrate.n={args.n}", f"calibrate.budgets=[{args.budget}]", f"calibrate.temperature={args.temperature}",
            "calibrate.top_p=1.0", "calibrate.early_stop.enabled=false", "calibrate.figures=false", *ENGINES[engine],
        ])
    GlobalHydra.instance().clear()
    with open_dict(cfg):
        cfg.data = OmegaConf.create(OmegaConf.to_container(thesis.thesis.data, resolve=True))
        # the embedded GGUF is converted into out/cache/hf once, for both engines
        if engine == "transformers":
            cfg.backend.cache_dir = str(out / "cache")
    t0 = time.perf_counter()
    run_dir = calibrate.run(cfg)
    cals = {c.problem_id: c for c in read_records(run_dir, "calibrations", Calibration)}
    print(f"  {engine:13s} {len(cals)} problems x N={args.n} at L={args.budget} in {time.perf_counter() - t0:.0f} s", flush=True)
    return cals


def noise_ranges(k_a: np.ndarray, k_b: np.ndarray, n: int, draws: int, rng: np.random.Generator) -> dict[str, tuple[float, float]]:
    """What two independent N-rollout calibrations of one policy give: each problem's pooled pass
    rate drawn twice (binomial), ``draws`` times; 95% ranges of the mean difference and the same-band share."""
    p = (k_a + k_b) / (2 * n)
    a = rng.binomial(n, p, size=(draws, len(p)))
    b = rng.binomial(n, p, size=(draws, len(p)))
    diff = (a - b).mean(axis=1) / n
    same = (np.vectorize(band)(a, n) == np.vectorize(band)(b, n)).mean(axis=1)
    return {"diff": tuple(np.quantile(diff, [0.025, 0.975])), "same_band": tuple(np.quantile(same, [0.025, 0.975]))}


def compare(base: dict[str, Calibration], other: dict[str, Calibration], n: int, rng: np.random.Generator) -> dict:
    """Paired comparison of two engines' calibrations of the same problems (see the module docstring)."""
    from scipy import stats

    ids = sorted(set(base) & set(other))
    k_a = np.array([base[i].successes for i in ids])
    k_b = np.array([other[i].successes for i in ids])
    d = (k_b - k_a) / n
    lo, hi = stats.t.interval(0.95, len(d) - 1, loc=d.mean(), scale=stats.sem(d)) if d.std() > 0 else (d.mean(), d.mean())
    flips = rng.choice([-1.0, 1.0], size=(20_000, len(d)))
    perm_p = float((np.abs((flips * d).mean(axis=1)) >= abs(d.mean()) - 1e-12).mean())
    same = float(np.mean([band(a, n) == band(b, n) for a, b in zip(k_a, k_b)]))
    return {
        "problems": len(ids), "mean_base": float(k_a.mean() / n), "mean_other": float(k_b.mean() / n),
        "diff": float(d.mean()), "diff_ci95": [float(lo), float(hi)], "sign_flip_p": perm_p, "same_band": same,
        "noise": noise_ranges(k_a, k_b, n, 4000, rng),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--problems", type=int, default=40)
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--budget", type=int, default=48)
    ap.add_argument("--temperature", type=float, default=0.6)
    ap.add_argument("--engines", default="llamacpp,transformers", help=f"comma-separated, the first is the base: {', '.join(ENGINES)}")
    ap.add_argument("--out", type=Path, help="run folders and cache (default: a temporary folder)")
    ap.add_argument("--quick", action="store_true", help="4 problems, N=4: proves the script runs")
    args = ap.parse_args()
    if args.quick:
        args.problems, args.n = 4, 4
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    out = args.out or Path(tempfile.mkdtemp(prefix="bench_policy."))
    print(f"bench_policy: {args.problems} thesis problems, N={args.n}, L={args.budget}, T={args.temperature}, "
          f"top-k 40, min-p 0.05; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; runs in {out}", flush=True)
    cals = {e: calibrate_with(e, args, out) for e in engines}
    rng = np.random.default_rng(0)
    results = {}
    for e in engines[1:]:
        r = results[e] = compare(cals[engines[0]], cals[e], args.n, rng)
        nd, ns = r["noise"]["diff"], r["noise"]["same_band"]
        print(f"{e} - {engines[0]}: {r['problems']} problems, mean pass rate {r['mean_other']:.3f} vs {r['mean_base']:.3f}, "
              f"paired difference {r['diff']:+.3f} [95% t {r['diff_ci95'][0]:+.3f}, {r['diff_ci95'][1]:+.3f}], "
              f"sign-flip p = {r['sign_flip_p']:.3f}; sampling noise alone (two calibrations of one policy): "
              f"difference within [{nd[0]:+.3f}, {nd[1]:+.3f}] in 95% of draws", flush=True)
        print(f"    same band: {r['same_band']:.3f} of problems; sampling noise alone: [{ns[0]:.3f}, {ns[1]:.3f}]; "
              f"inside both noise ranges: {nd[0] <= r['diff'] <= nd[1] and ns[0] <= r['same_band'] <= ns[1]}", flush=True)
    (out / "bench_policy.json").write_text(json.dumps({"args": vars(args) | {"out": str(out)}, "results": results}, indent=2, default=str))


if __name__ == "__main__":
    main()
