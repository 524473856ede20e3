"""The CPU engine against llama.cpp's own batched loop, in one run (issue 32; prints ratios).

    python tests/benchmarks/bench_engine.py [--widths 1,2,4,8,16,32] [--steps 48] [--old DIR] [--set K=V] [--quick]

Parts, each in a process of its own (fresh model, cold LLM cache), on the embedded SmolLM2-135M:

* ``loop W``: llama.cpp's own batched decode loop through llama-cpp-python's low-level API: one
  CHAMP prompt evaluated once and copied to W sequences (``llama_memory_seq_cp``, one KV stream
  each), then ``--steps`` steps of one ``llama_decode`` with W tokens, each sequence sampling with
  llama.cpp's sampler chain (top-k 40, top-p, min-p, temperature 1, seeded draw), no stop: the
  most generated tokens per second this machine gives at width W, threads = usable cores. The
  best width is the reference ("best loop"). Each loop also times one ``llama_decode`` of a
  512-token prompt (CHAMP text) as one sequence: prompt evaluation's rate, which bounds a stage
  whose prompts are long (the Goose filter's are about 800 tokens each). After the stages the
  loops run again on a prompt of CHAMP text as long as the Goose filter's mean prompt: there each
  step attends over some 800 cells per sequence, so width helps little (measured 121 / 128 / 134
  tokens/s at 8 / 16 / 32 against 186 / 195 / 207 on a CHAMP prompt); with the prompt's own rate
  they give the seconds llama.cpp's own loop needs for the Goose filter's prompt and generated
  tokens, printed beside the stage's. The loops also run over the calibration's largest budget
  (256 steps) from a prompt as long as its mean one: llama.cpp attends, for every sequence of a
  ``llama_decode``, over the cells of its longest sequence padded to 256, so once sequences pass
  256 cells a step costs more (measured at 16 sequences: 71 ms at 256 cells, 89 at 512), which the
  48-step loop from a short prompt never meets and the stage does.
* ``calibrate``: the main job's live calibration (``mbs-calibrate``, 10 CHAMP problems x L = 128
  and 256 x N = 4) with early stopping on (rounds of 2): generated tokens over the stage's rollout
  phase (grading pool, shards and LLM cache included).
* ``goose``: the main job's Golden Goose step (teacher-free, 6 CHAMP solutions, 16 rollouts per
  item, early stopping in rounds of 2): generated tokens over its difficulty filter's seconds.

Generated tokens are the backend's (``completion_tokens`` of its stats): with speculative rounds
they include samples of rounds drawn before their group settled and never written; the tokens
of the written rollouts are printed beside them.

For both stages also: prompt tokens llama.cpp evaluated (counted at ``llama_decode``: tokens of
batches that are not one decode step) over distinct prompt tokens (the prompts' lengths, each
prompt once). ``--old DIR`` runs the stages also on the checkout in DIR (e.g. ``git worktree add
/tmp/old <commit>``), in A B B A order (new old old new), so machine drift and other jobs' load
hit both alike. The 1-minute load average is printed beside each part, and the share of CPU time
the hypervisor took meanwhile (steal, from ``/proc/stat``: on this virtual machine it ran from 1%
to 26% within minutes, which moves every number by as much).

Targets (issue 32): each stage >= 0.9 x the best loop; evaluated / distinct prompt tokens <= 1.2.
``--quick`` (widths 1 and 4, 8 steps, 2 problems, goose 2 items) proves the script runs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _count_prompt_tokens() -> dict:
    """Wrap ``llama_decode`` (under both names llama-cpp-python has for it) to count prompt tokens
    (batches with a row whose logits are not asked for: decode steps ask for every row) and
    decode steps; returns the live counter."""
    import llama_cpp

    counts = {"prompt": 0, "prompt_s": 0.0, "steps": 0, "step_tokens": 0, "step_s": 0.0}
    real = llama_cpp.llama_decode

    def counting(ctx, batch):
        n = int(batch.n_tokens)
        step = all(batch.logits[i] for i in range(n)) and n > 0
        t0 = time.perf_counter()
        rc = real(ctx, batch)
        if step:
            counts["steps"] += 1
            counts["step_tokens"] += n
            counts["step_s"] += time.perf_counter() - t0
        else:
            counts["prompt"] += n
            counts["prompt_s"] += time.perf_counter() - t0
        return rc

    llama_cpp.llama_decode = counting
    llama_cpp.llama_cpp.llama_decode = counting  # the name llama-cpp-python's own Llama.eval calls
    return counts


def _put_prompt(batch, tokens: list[int], start: int = 0) -> None:
    """Fill ``batch`` with ``tokens`` as sequence 0 from position ``start``, logits for the last only."""
    batch.n_tokens = len(tokens)
    for i, t in enumerate(tokens):
        batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.seq_id[i][0], batch.logits[i] = t, start + i, 1, 0, False
    batch.logits[len(tokens) - 1] = True


def child_loop(width: int, steps: int, prompt_len: int = 0) -> dict:
    """llama.cpp's batched loop at ``width`` sequences (see the module docstring); with
    ``prompt_len`` its prompt is that many tokens of CHAMP text (evaluated in pieces of 512)."""
    import llama_cpp as L
    from llama_cpp import Llama, _internals

    from mbs.data.champ import load_champ
    from mbs.llm.base import sample_seed
    from mbs.llm.llamacpp import LlamaCppBackend
    from mbs.llm.llamacpp_sampling import sampler_chain
    from mbs.prompts import user_messages
    from mbs.resources import usable_cpus

    threads = usable_cpus()
    engine = LlamaCppBackend()  # the file and KV cache type the stages run (issue 47: the F32 de-quantisation)
    llm = Llama(model_path=str(engine.run_path), n_ctx=1024, n_threads=threads, n_threads_batch=threads, verbose=False,
                **engine._kv_types())
    msgs = user_messages("math_boxed_v1", problem=load_champ()[0].prompt)
    prompt = llm.tokenize(_render(llm, msgs).encode("utf-8"), add_bos=False, special=True)
    text = " ".join(p.prompt for p in load_champ()[:80])
    if prompt_len:
        prompt = llm.tokenize(text.encode("utf-8"), add_bos=False)[:prompt_len]
    cells = -(-(len(prompt) + steps + 1) // 256) * 256
    params = L.llama_context_params.from_buffer_copy(llm.context_params)
    params.n_seq_max, params.n_ctx, params.kv_unified = width, width * cells, False
    params.n_batch = params.n_ubatch = max(512, width)
    ctx = _internals.LlamaContext(model=llm._model, params=params, verbose=False)
    mem = ctx.memory
    batch = L.llama_batch_init(max(512, width), 0, 1)
    # prompt evaluation: 512 tokens of CHAMP text as one sequence, one llama_decode, in a context of
    # its own (the loop's may hold fewer than 512 cells)
    long = llm.tokenize(text.encode("utf-8"), add_bos=False)[:512]
    _put_prompt(batch, long)
    t0 = time.perf_counter()
    assert L.llama_decode(llm._ctx.ctx, batch) == 0
    prompt_tok_s = len(long) / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    for start in range(0, len(prompt), 512):  # the loop's prompt, once, as sequence 0
        _put_prompt(batch, prompt[start : start + 512], start)
        assert L.llama_decode(ctx.ctx, batch) == 0
    loop_prompt_tok_s = len(prompt) / (time.perf_counter() - t0)
    for s in range(1, width):
        L.llama_memory_seq_cp(mem, 0, s, -1, -1)
    samplers = [sampler_chain(sample_seed(0, s), 1.0, 1.0) for s in range(width)]
    rows = [batch.n_tokens - 1] * width
    t0 = time.perf_counter()
    for step in range(steps):
        batch.n_tokens = width
        for s in range(width):
            tok = L.llama_sampler_sample(samplers[s], ctx.ctx, rows[s])
            batch.token[s], batch.pos[s], batch.n_seq_id[s], batch.seq_id[s][0], batch.logits[s] = (
                tok, len(prompt) + step, 1, s, True)
            rows[s] = s
        assert L.llama_decode(ctx.ctx, batch) == 0
    seconds = time.perf_counter() - t0
    return {"tokens": width * steps, "seconds": seconds, "threads": threads, "prompt_tok_s": prompt_tok_s,
            "prompt_len": len(prompt), "loop_prompt_tok_s": loop_prompt_tok_s}


def _render(llm, messages) -> str:
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    eos, bos = llm.token_eos(), llm.token_bos()
    fmt = Jinja2ChatFormatter(template=llm.metadata["tokenizer.chat_template"],
                              eos_token=llm.detokenize([eos], special=True).decode(),
                              bos_token=llm.detokenize([bos], special=True).decode(), stop_token_ids=[eos])
    return fmt(messages=messages).prompt


def _steps(counts: dict) -> dict:
    """Decode steps, their mean width (sequences per step), mean and total seconds, and the
    seconds of prompt evaluation."""
    steps = max(1, counts["steps"])
    return {"steps": counts["steps"], "width": counts["step_tokens"] / steps, "step_ms": 1000 * counts["step_s"] / steps,
            "step_s": counts["step_s"], "prompt_s": counts["prompt_s"]}


def _distinct_prompt_tokens(rollouts) -> int:
    return sum({r.problem_id: r.prompt_tokens for r in rollouts}.values())


def child_calibrate(tmp: str, quick: bool, sets: list[str]) -> dict:
    """The main job's live calibration with early stopping (see the module docstring)."""
    counts = _count_prompt_tokens()
    from hydra import compose, initialize_config_dir

    from mbs.cli import config_dir
    from mbs.io import read_manifest, read_records
    from mbs.records import Rollout
    from mbs.stages.calibrate import run

    with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
        cfg = compose("calibrate", [
            f"paths.root={tmp}", f"paths.cache_dir={tmp}/cache", f"out_dir={tmp}/run",
            f"data.limit={2 if quick else 10}", "calibrate.n=4", f"calibrate.budgets=[{'16' if quick else '128,256'}]",
            "calibrate.early_stop.enabled=true", "calibrate.figures=false", *sets,
        ])
    run_dir = run(cfg)
    m = read_manifest(run_dir)
    stats = next(iter(m["backends"].values()))
    rollouts = list(read_records(run_dir, "rollouts", Rollout))
    return {"tokens": stats["completion_tokens"], "recorded": sum(r.completion_tokens for r in rollouts),
            "seconds": m["timings_s"]["rollouts"], "rollouts": len(rollouts), **_steps(counts),
            "prompt_evaluated": counts["prompt"], "prompt_distinct": _distinct_prompt_tokens(rollouts),
            "problems": len({r.problem_id for r in rollouts}), "budget": max(r.budget for r in rollouts),
            "texts": sorted((r.problem_id, r.budget, r.sample_index, r.text) for r in rollouts)}


def child_goose(tmp: str, quick: bool, sets: list[str]) -> dict:
    """The main job's Golden Goose step (see the module docstring)."""
    counts = _count_prompt_tokens()
    from hydra import compose, initialize_config_dir

    from mbs.cli import config_dir
    from mbs.io import read_manifest, read_records
    from mbs.records import Rollout
    from mbs.stages.synthesize import run

    with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
        cfg = compose("synthesize", [
            f"paths.root={tmp}", f"paths.cache_dir={tmp}/cache", f"out_dir={tmp}/run", "method=goose",
            "goose.source=champ", "goose.teacher_free=true", f"data.limit={2 if quick else 6}",
            *(["goose.filter.n=4", "goose.filter.budget=16"] if quick else []), *sets,
        ])
    run_dir = run(cfg)
    m = read_manifest(run_dir)
    stats = next(iter(m["backends"].values()))
    rollouts = list(read_records(run_dir, "rollouts", Rollout))
    return {"tokens": stats["completion_tokens"], "recorded": sum(r.completion_tokens for r in rollouts),
            "seconds": m["timings_s"]["filter"], "rollouts": len(rollouts), "items": len({r.problem_id for r in rollouts}), **_steps(counts),
            "prompt_evaluated": counts["prompt"], "prompt_distinct": _distinct_prompt_tokens(rollouts),
            "texts": sorted((r.problem_id, r.budget, r.sample_index, r.text) for r in rollouts)}


def _cpu_ticks() -> tuple[int, int]:
    """(steal, total) jiffies of all CPUs from ``/proc/stat`` ((0, 0) where there is none)."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except OSError:
        return 0, 0
    return (fields[7] if len(fields) > 7 else 0), sum(fields[:8])


def spawn(args, part: str, *extra: str, repo: Path = REPO) -> dict:
    load, (steal0, total0) = os.getloadavg()[0], _cpu_ticks()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(repo), os.environ.get("PYTHONPATH", "")]), "TQDM_DISABLE": "1"}
    with tempfile.TemporaryDirectory() as tmp:
        res = subprocess.run(
            [sys.executable, __file__, "--child", part, *extra, "--tmp", tmp, *(["--quick"] if args.quick else []),
             *[f"--set={o}" for o in args.set]],
            check=False, capture_output=True, text=True, env=env, cwd=tmp,
        )
    if res.returncode != 0:
        sys.exit(f"{part} ({repo}) failed:\n{res.stderr[-4000:]}")
    row = json.loads(res.stdout.strip().splitlines()[-1])
    steal1, total1 = _cpu_ticks()
    row["load"] = load
    row["steal"] = (steal1 - steal0) / max(1, total1 - total0)  # the hypervisor's share of the cores meanwhile
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--widths", default="1,2,4,8,16,32", help="loop widths (sequences per batch)")
    ap.add_argument("--steps", type=int, default=48, help="decode steps of the loop")
    ap.add_argument("--old", type=Path, help="another checkout whose stages run beside this one's (A B B A)")
    ap.add_argument("--parts", default="loop,calibrate,goose")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a Hydra override of both stages, e.g. backend.batch_samples=32 (repeatable)")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    ap.add_argument("--tmp", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.quick:
        args.widths, args.steps = "1,4", 8
    if args.child:
        # as mbs.llm.llamacpp sets them before llama.cpp's OpenMP starts (spinning threads collapse on
        # shared cores); set here since the loop and the prompt-token counter import llama_cpp first
        try:
            from mbs.resources import set_openmp_wait
        except ImportError:  # an --old checkout from before it: passive only, as that mbs set it
            os.environ.setdefault("OMP_WAIT_POLICY", "passive")
        else:
            set_openmp_wait()
        part = args.child[0]
        if part == "loop":
            row = child_loop(*(int(a) for a in args.child[1:]))
        elif part == "calibrate":
            row = child_calibrate(args.tmp, args.quick, args.set)
        else:
            row = child_goose(args.tmp, args.quick, args.set)
        print(json.dumps(row))
        return

    from mbs.resources import usable_cpus

    parts = args.parts.split(",")
    widths = [int(w) for w in args.widths.split(",")]
    print(f"usable cores {usable_cpus()} (os.cpu_count() {os.cpu_count()}); {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
          + (f"; stages with {' '.join(args.set)}" if args.set else ""))
    loops: dict[int, list[float]] = {w: [] for w in widths}
    prompt_rates: list[float] = []

    def run_loops(order):
        for w in order:
            r = spawn(args, "loop", str(w), str(args.steps))
            loops[w].append(r["tokens"] / r["seconds"])
            prompt_rates.append(r["prompt_tok_s"])
            print(f"  loop W={w:<3} {r['tokens']:5d} tokens in {r['seconds']:6.2f} s = {r['tokens'] / r['seconds']:7.1f} tok/s; "
                  f"a 512-token prompt evaluated at {r['prompt_tok_s']:.0f} tok/s ({r['threads']} threads, load {r['load']:.1f}, steal {100 * r['steal']:.0f}%)", flush=True)

    if "loop" in parts:
        run_loops(widths)
    versions = [("new", REPO)] + ([("old", args.old.resolve())] if args.old else [])
    order = versions + versions[::-1] if args.old else versions * 2  # A B B A (or A A)
    stages = {p: {v: [] for v, _ in versions} for p in ("goose", "calibrate") if p in parts}
    for part in stages:
        for label, repo in order:
            r = spawn(args, part, repo=repo)
            stages[part][label].append(r)
            print(f"  {part:<9} {label}: {r['tokens']:5d} tokens in {r['seconds']:6.1f} s = {r['tokens'] / r['seconds']:6.1f} tok/s, "
                  f"{r['rollouts']} rollouts written ({r['recorded']} of the tokens), prompt tokens evaluated {r['prompt_evaluated']} / distinct "
                  f"{r['prompt_distinct']} = {r['prompt_evaluated'] / max(1, r['prompt_distinct']):.2f}; {r.get('steps', 0)} decode "
                  f"steps, {r.get('width', 0):.1f} sequences and {r.get('step_ms', 0):.0f} ms each ({r.get('step_s', 0):.1f} s); "
                  f"prompts {r.get('prompt_s', 0):.1f} s (load {r['load']:.1f}, "
                  f"steal {100 * r['steal']:.0f}%)",
                  flush=True)
    if "loop" in parts:
        run_loops(widths[::-1])  # the loops again, after the stages: A B B A around them
    def loops_at(steps: int, prompt_len: int, what: str, show_prompt: bool) -> tuple[dict[int, float], list[float]]:
        """The loop at every width, ``steps`` steps from ``prompt_len`` tokens of CHAMP text:
        generated tokens/s by width, and the prompt's rates."""
        rates, prompt = {}, []
        for w in widths:
            r = spawn(args, "loop", str(w), str(steps), str(prompt_len))
            rates[w] = r["tokens"] / r["seconds"]
            prompt.append(r["loop_prompt_tok_s"])
            its = f"; its prompt evaluated at {r['loop_prompt_tok_s']:.0f} tok/s" if show_prompt else ""
            print(f"  loop W={w:<3} prompt {r['prompt_len']} {what} {r['tokens']:5d} tokens in "
                  f"{r['seconds']:6.2f} s = {rates[w]:7.1f} tok/s{its} (load {r['load']:.1f}, steal {100 * r['steal']:.0f}%)", flush=True)
        return rates, prompt

    # llama.cpp's own loop on prompts as long as the Goose filter's: decoding there is bound by
    # attention over the prompt's cells (every sequence reads its own), so it is the ceiling
    # a stage of such prompts can reach
    goose_len, long_loops, long_prompt = 0, {}, []
    if "loop" in parts and "goose" in stages:
        rows = stages["goose"]["new"]
        goose_len = round(sum(r["prompt_distinct"] for r in rows) / max(1, sum(r["items"] for r in rows)))
        long_loops, long_prompt = loops_at(args.steps, goose_len, "tokens (the Goose filter's mean):", True)
    # llama.cpp's own loop over the calibration's largest budget from a prompt as long as its mean
    # one: each step attends over as many cells as the stage's sequences hold by then (llama.cpp
    # pads them to 256 per call, so the stage's sequences past 256 cells cost every sequence of
    # the call more), which the 48-step loop from a short prompt never reaches
    cal_len, cal_budget, deep_loops = 0, 0, {}
    if "loop" in parts and "calibrate" in stages:
        rows = stages["calibrate"]["new"]
        cal_len = round(sum(r["prompt_distinct"] for r in rows) / max(1, sum(r["problems"] for r in rows)))
        cal_budget = max(r["budget"] for r in rows)
        deep_loops, _ = loops_at(cal_budget, cal_len, f"tokens (the calibration's mean), {cal_budget} steps (its largest budget):", False)
    print()
    best = None
    if loops and any(loops.values()):
        mean = {w: sum(v) / len(v) for w, v in loops.items()}
        best = max(mean, key=mean.get)
        print("llama.cpp loop tok/s by width: " + ", ".join(f"W={w} {v:.1f}" for w, v in mean.items())
              + f"; best W={best}: {mean[best]:.1f} tok/s; prompt evaluation (512 tokens, one sequence) "
              f"{sum(prompt_rates) / len(prompt_rates):.0f} tok/s")
    long_best = max(long_loops, key=long_loops.get) if long_loops else None
    if long_best is not None:
        print(f"llama.cpp loop tok/s at the Goose filter's prompt length ({goose_len} tokens): "
              + ", ".join(f"W={w} {v:.1f}" for w, v in long_loops.items())
              + f"; best W={long_best}: {long_loops[long_best]:.1f}; that prompt evaluated at {sum(long_prompt) / len(long_prompt):.0f} tok/s")
    deep_best = max(deep_loops, key=deep_loops.get) if deep_loops else None
    if deep_best is not None:
        print(f"llama.cpp loop tok/s over the calibration's budget ({cal_budget} steps from a {cal_len}-token prompt): "
              + ", ".join(f"W={w} {v:.1f}" for w, v in deep_loops.items()) + f"; best W={deep_best}: {deep_loops[deep_best]:.1f}")
    for part, by in stages.items():
        for label, rows in by.items():
            tps = sum(r["tokens"] for r in rows) / sum(r["seconds"] for r in rows)
            used = sum(r["recorded"] for r in rows) / sum(r["seconds"] for r in rows)
            ratio = sum(r["prompt_evaluated"] for r in rows) / max(1, sum(r["prompt_distinct"] for r in rows))
            vs = f" = {tps / mean[best]:.2f} x the best loop (target >= 0.9)" if best else ""
            print(f"{part:<9} {label}: {tps:6.1f} tok/s{vs} ({used:.1f} tok/s of written rollouts); prompt tokens evaluated / distinct {ratio:.2f} (target <= 1.2)")
            if part == "calibrate" and deep_best is not None:
                print(f"          {label}: {tps / deep_loops[deep_best]:.2f} x the best loop over its budget")
            if part == "goose" and long_best is not None:
                # llama.cpp's own seconds for the stage's work: its prompt tokens at the long
                # loop's prompt rate, its generated tokens at the long loop's best rate
                own = (sum(r["prompt_evaluated"] for r in rows) / (sum(long_prompt) / len(long_prompt))
                       + sum(r["tokens"] for r in rows) / long_loops[long_best]) / len(rows)
                took = sum(r["seconds"] for r in rows) / len(rows)
                print(f"          {label}: {tps / long_loops[long_best]:.2f} x the loop at its prompt length; llama.cpp's own loop "
                      f"would take {own:.1f} s for the same prompt and generated tokens, the stage took {took:.1f} s ({own / took:.2f})")
            same = all(r["texts"] == rows[0]["texts"] for r in rows)
            print(f"          {label}: the {len(rows)} runs gave {'the same' if same else 'DIFFERENT'} samples")
        if len(by) == 2:
            a, b = by["new"][0]["texts"], by["old"][0]["texts"]
            shared = {tuple(k[:3]): k[3] for k in b}
            both = [k for k in a if tuple(k[:3]) in shared]
            print(f"          new vs old: {sum(shared[tuple(k[:3])] == k[3] for k in both)}/{len(both)} shared rollouts have the same text")


if __name__ == "__main__":
    main()
