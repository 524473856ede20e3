"""Every in-process vLLM scenario of ``tests/vllm_checks/test_vllm_engine.py``, on one engine.

``python engine.py REQUEST.json`` with ``{"out": FILE}``, in ``.venv-vllm``, from a scratch folder
(outputs and caches go there). Converts the embedded SmolLM2-135M-Instruct GGUF into a Hugging Face
checkpoint once, then runs mbs's vLLM paths on vLLM's CPU build: the stages (calibrate with early
stopping off and on, an identical rerun, a run that fails halfway and resumes; evaluate; a Golden
Goose synthesis with vLLM as student) and the backend itself (seeds, the sampling parameters vLLM
applies, the first step's kept tokens for the one-policy check, faults). Every backend built here
shares one engine (``mbs.llm.vllm_backend`` keeps one per engine setting). Each scenario's results,
or its traceback, go under ``scenarios`` in ``FILE`` as JSON.
"""

from __future__ import annotations

import json
import math
import sys
import time
import traceback
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from mbs.cli import config_dir
from mbs.llm import CachedBackend, close_all
from mbs.llm.base import BackendError, ChatRequest
from mbs.llm.cache import cache_key
from mbs.llm.hf_checkpoint import trainable_checkpoint
from mbs.llm.llamacpp import embedded_model_path
from mbs.llm.vllm_backend import VLLMBackend, _sampling_params

WORK = Path.cwd()
CONVERT = WORK / "convert"
MAX_LEN = 1024
#: Engine keyword arguments of every backend here: processed logprobs (after temperature, top-k,
#: top-p and min-p) for the one-policy check; they change what is returned, not what is sampled.
#: Every engine here runs eagerly (no torch.compile: the compile took minutes of the engine's start
#: on 2 busy cores).
ENGINE_KW = {"logprobs_mode": "processed_logprobs", "max_logprobs": 64}
ENGINE = ["backend=vllm", f"backend.cache_dir={CONVERT}", f"backend.max_model_len={MAX_LEN}", "backend.enforce_eager=true",
          "+backend.engine_kwargs.logprobs_mode=processed_logprobs", "+backend.engine_kwargs.max_logprobs=64"]
#: Calibration: 6 Reasoning Gym chain_sum problems (one-digit operands, where the embedded model has
#: problems in every band), N=4 at two budgets.
CAL = ["data=reasoning_gym", "data.size=6", "data.levels.chain_sum={1digit: {min_digits: 1, max_digits: 1, min_terms: 2, max_terms: 2}}",
       "calibrate.n=4", "calibrate.budgets=[32,64]", "calibrate.temperature=0.6", "calibrate.figures=false", "verifier.workers=1"]
SEA = [{"role": "user", "content": "Write one sentence about the sea."}]


def backend(**kw) -> VLLMBackend:
    """A backend on the shared engine (same engine settings as the stage runs' ``backend=vllm``)."""
    kw.setdefault("enforce_eager", True)
    return VLLMBackend(model="embedded", cache_dir=str(CONVERT), max_model_len=MAX_LEN, engine_kwargs=ENGINE_KW, **kw)


def cfg(name: str, overrides: list[str], out: str, cache: str):
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
        return compose(config_name=name, overrides=[f"paths.root={WORK}", f"paths.cache_dir={WORK / cache}",
                                                    f"out_dir={WORK / out}", *ENGINE, *overrides])


def texts(comps) -> list[str]:
    return [c.text for c in comps]


def rollouts(run_dir: Path) -> dict[str, dict]:
    from mbs.io import read_records
    from mbs.records import Rollout

    return {json.dumps(r.key): {"text": r.text, "reward": r.reward, "tokens": r.completion_tokens, "finish": r.finish_reason}
            for r in read_records(run_dir, "rollouts", Rollout)}


def decisions(run_dir: Path) -> dict[str, list]:
    from mbs.io import read_records
    from mbs.records import Calibration

    return {json.dumps(c.key): [c.band, c.usable, c.n, c.successes] for c in read_records(run_dir, "calibrations", Calibration)}


def stage_backends(run_dir: Path) -> dict:
    from mbs.io import read_manifest

    return read_manifest(run_dir)["backends"]


# -- scenarios -------------------------------------------------------------------------------


def calibrate() -> dict:
    """Early stopping off, then on (its own cache), then an identical rerun of the first."""
    from mbs.io import read_summary
    from mbs.stages.calibrate import run

    t0 = time.perf_counter()
    full = run(cfg("calibrate", CAL, "cal_full", "cache_full"))
    full_s = time.perf_counter() - t0
    es = run(cfg("calibrate", CAL + ["calibrate.early_stop.enabled=true", "calibrate.early_stop.batch=2"], "cal_es", "cache_es"))
    again = run(cfg("calibrate", CAL, "cal_again", "cache_full"))
    return {"full": {"decisions": decisions(full), "rollouts": rollouts(full), "backends": stage_backends(full), "seconds": full_s,
                     "simulation": read_summary(full).get("early_stop_simulation")},
            "es": {"decisions": decisions(es), "rollouts": rollouts(es), "backends": stage_backends(es),
                   "drawn": read_summary(es)["rollouts"]},
            "again": {"rollouts": rollouts(again), "backends": stage_backends(again)}}


def resume() -> dict:
    """A calibration (early stopping on: one engine call per round; the first budget only) that
    fails in its second engine call, then the same run again: which samples the engine was asked
    for, in both."""
    from mbs.stages.calibrate import run

    drawn: list[str] = []
    calls = {"n": 0, "fail_at": 2}
    real = VLLMBackend.generate

    def generate(self, requests):
        calls["n"] += 1
        if calls["n"] == calls["fail_at"]:
            raise BackendError("simulated kill in the second engine call")
        drawn.extend(json.dumps([r.messages, r.seed, i, r.max_tokens]) for r in requests for i in r.indices)
        return real(self, requests)

    VLLMBackend.generate = generate
    args = CAL + ["calibrate.early_stop.enabled=true", "calibrate.early_stop.batch=2", "calibrate.budgets=[32]"]
    try:
        try:
            run(cfg("calibrate", args, "cal_kill", "cache_kill"))
            first_error = None
        except Exception as err:  # noqa: BLE001 - the simulated kill
            first_error = f"{type(err).__name__}: {err}"
        first = len(drawn)
        out = run(cfg("calibrate", args, "cal_kill", "cache_kill"))
    finally:
        VLLMBackend.generate = real
    return {"first_error": first_error, "drawn_first": first, "drawn_total": len(drawn), "distinct": len(set(drawn)),
            "rollouts": rollouts(out), "decisions": decisions(out), "backends": stage_backends(out)}


def evaluate() -> dict:
    from mbs.io import read_summary
    from mbs.stages.evaluate import run

    args = ["data.limit=2", "eval.k=2", "eval.budgets=[32]", "eval.figures=false", "verifier.workers=1"]
    first = run(cfg("evaluate", args, "eval_first", "cache_eval"))
    again = run(cfg("evaluate", args, "eval_again", "cache_eval"))
    return {"summary": read_summary(first)["results"], "rollouts": rollouts(first), "backends": stage_backends(first),
            "again": {"backends": stage_backends(again), "rollouts": rollouts(again)}}


def synthesize() -> dict:
    """Golden Goose, teacher-free CHAMP items, filtered by vLLM as the student."""
    from mbs.io import read_summary
    from mbs.stages.synthesize import run

    args = ["method=goose", "synth.figures=false", "verifier.workers=1", "goose.champ.concepts=false", "goose.source=champ",
            "goose.teacher_free=true", "data.limit=1", "goose.filter.n=2", "goose.filter.budget=8", "synth.early_stop=false",
            "teacher.pool.0.max_tokens=256"]  # the teacher-free items need no teacher; its budget must fit max_model_len
    out = run(cfg("synthesize", args, "synth", "cache_synth"))
    s = read_summary(out)
    return {"items_built": s["items_built"], "rejected": s["rejected"], "student": s["student"], "rollouts": rollouts(out),
            "backends": s["backends"]}


def seeds() -> dict:
    b = backend()
    req = ChatRequest(SEA, n=4, max_tokens=24, temperature=1.0, seed=7)
    first = b.generate([req])[0]
    again = b.generate([req])[0]
    split = [c for comps in b.generate(req.split([0, 1]) + req.split([2, 3])) for c in comps]
    other = ChatRequest([{"role": "user", "content": "Name three colours."}], n=3, max_tokens=24, seed=1)
    mixed = b.generate([other, req])[1]
    reseeded = b.generate([ChatRequest(SEA, n=4, max_tokens=24, temperature=1.0, seed=8)])[0]
    return {"first": texts(first), "again": texts(again), "split": texts(split), "mixed": texts(mixed),
            "reseeded": texts(reseeded), "indices": [c.sample_index for c in split]}


def sampling() -> dict:
    """What vLLM is given (its own SamplingParams, captured at LLM.chat) and what it did with it."""
    b = backend(top_k=5, min_p=0.1)
    llm = b._load()
    real_chat = llm.chat
    seen: dict[str, list] = {"params": [], "outputs": []}

    def chat(convs, params, **kw):
        outs = real_chat(convs, params, **kw)
        seen["params"].extend(params)
        seen["outputs"].extend(outs)
        return outs

    llm.chat = chat
    try:
        b.generate([ChatRequest(SEA, n=2, max_tokens=16, temperature=0.7, top_p=0.9, seed=3, stop=("\n",), first_index=5)])
        sent = [{"cls": f"{type(p).__module__}.{type(p).__name__}", "n": p.n, "temperature": p.temperature, "top_p": p.top_p,
                 "top_k": p.top_k, "min_p": p.min_p, "max_tokens": p.max_tokens, "stop": p.stop, "seed": p.seed} for p in seen["params"]]
        # stop strings: a space ends every response at its first space
        seen["outputs"].clear()
        stop = backend().generate([ChatRequest(SEA, n=3, max_tokens=32, seed=4, stop=(" ",))])[0]
        stop_out = [{"text": o.outputs[0].text, "stop_reason": o.outputs[0].stop_reason, "finish_reason": o.outputs[0].finish_reason}
                    for o in seen["outputs"]]
        # max_tokens: a long answer is cut at the budget
        cut = backend().generate([ChatRequest([{"role": "user", "content": "Tell a long story about a dragon."}], n=3,
                                              max_tokens=7, seed=5)])[0]
        # temperature 0 (greedy) against filters that leave only the top token at temperature 1
        greedy = texts(backend().generate([ChatRequest(SEA, n=3, max_tokens=20, temperature=0.0, seed=11)])[0])
        ask = [ChatRequest(SEA, n=3, max_tokens=20, temperature=1.0, seed=11)]
        one_top = {"top_k=1": texts(backend(top_k=1).generate(ask)[0]), "min_p=1": texts(backend(min_p=1.0).generate(ask)[0]),
                   "top_p=1e-6": texts(backend().generate([ChatRequest(SEA, n=3, max_tokens=20, temperature=1.0, top_p=1e-6, seed=11)])[0]),
                   "unfiltered": texts(backend().generate(ask)[0])}
    finally:
        llm.chat = real_chat
    return {"sent": sent, "stop": {"texts": texts(stop), "finish": [c.finish_reason for c in stop], "vllm": stop_out},
            "cut": [[c.completion_tokens, c.finish_reason] for c in cut], "greedy": greedy, "one_top": one_top}


def one_policy() -> dict:
    """The tokens vLLM keeps at the first generated step (its processed logprobs: after temperature,
    top-k, top-p and min-p) on the one-policy test's 24 prompts, at two settings."""
    from vllm import SamplingParams

    from mbs.calibration.sampling import messages_for
    from mbs.data import load_problems

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
        thesis = compose(config_name="thesis", overrides=["thesis.data.size=12"])
        champ = compose(config_name="calibrate", overrides=["data=champ", "data.limit=12"])
    prompts = []
    for c, data in ((thesis, thesis.thesis.data), (champ, champ.data)):
        problems, _ = load_problems(data)
        prompts += [messages_for(p, c.calibrate.templates) for p in problems[:12]]
    settings = [[0.6, 1.0, 40, 0.05], [1.0, 0.9, 40, 0.0]]
    out = {"prompts": prompts, "settings": settings, "kept": [], "prompt_ids": []}
    llm = backend()._load()
    for temperature, top_p, top_k, min_p in settings:
        params = []
        for msgs in prompts:
            p = _sampling_params(ChatRequest(msgs, max_tokens=1, temperature=temperature, top_p=top_p, seed=0), 0,
                                 SamplingParams, top_k, min_p)
            p.logprobs = 64
            params.append(p)
        outs = llm.chat(prompts, params, use_tqdm=False)
        kept = []
        for o in outs:
            step = o.outputs[0].logprobs[0]
            kept.append({str(t): math.exp(lp.logprob) for t, lp in step.items() if math.isfinite(lp.logprob)})
        out["kept"].append(kept)
        out["prompt_ids"] = [list(o.prompt_token_ids) for o in outs]
    return out


def faults() -> dict:
    """A prompt longer than max_model_len; a prompt plus its budget longer than it; a model name the
    offline hub cannot resolve; a path to no model. Nothing may be cached for a failed call."""
    got: dict = {}
    cache = WORK / "cache_fault"
    for name, req in (("prompt_too_long", ChatRequest([{"role": "user", "content": "sea " * 1500}], n=2, max_tokens=8)),
                      ("budget_too_long", ChatRequest([{"role": "user", "content": "sea " * 700}], n=2, max_tokens=400, seed=2))):
        cb = CachedBackend(backend(), str(cache))
        try:
            cb.generate([req])
            got[name] = {"error": None}
        except BackendError as err:
            keys = [cache_key(cb.name, cb.model_id, req, i, cb.backend.cache_params) for i in req.indices]
            got[name] = {"error": str(err), "cached": sum(cb.cache.get(k) is not None for k in keys)}
        after = cb.generate([ChatRequest(SEA, n=1, max_tokens=4)])  # the engine still serves
        got[name]["then"] = after[0][0].completion_tokens
    t0 = time.perf_counter()
    try:
        VLLMBackend(model="no-such-org/no-such-model", max_model_len=256).generate([ChatRequest(SEA)])
        got["hub_name_offline"] = {"error": None}
    except BackendError as err:
        got["hub_name_offline"] = {"error": str(err), "seconds": time.perf_counter() - t0}
    try:
        VLLMBackend(model=str(WORK / "no" / "such" / "model"))
        got["bad_path"] = {"error": None}
    except Exception as err:  # noqa: BLE001 - the type is checked by the test
        got["bad_path"] = {"error": str(err), "type": type(err).__name__}
    return got


def small_kv() -> dict:
    """An engine whose KV cache (1 MiB) cannot hold one sequence of max_model_len tokens."""
    t0 = time.perf_counter()
    try:
        backend(kv_cache_memory_bytes=1 << 20).generate([ChatRequest(SEA)])
        return {"message": None}
    except BackendError as err:
        return {"message": str(err), "seconds": time.perf_counter() - t0}


def main() -> None:
    request = json.loads(Path(sys.argv[1]).read_text())
    out = Path(request["out"])
    results: dict = {"scenarios": {}}
    t0 = time.perf_counter()
    results["checkpoint"] = str(trainable_checkpoint(embedded_model_path(), CONVERT))
    results["convert_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    b = backend()
    b.generate([ChatRequest(SEA, max_tokens=2)])
    results["engine_start_s"] = time.perf_counter() - t0
    for fn in (calibrate, resume, evaluate, synthesize, seeds, sampling, one_policy, faults, small_kv):
        t1 = time.perf_counter()
        try:
            results["scenarios"][fn.__name__] = fn()
        except Exception:  # noqa: BLE001 - recorded; the test of this scenario fails with it
            results["scenarios"][fn.__name__] = {"error": traceback.format_exc()}
        results["scenarios"][fn.__name__]["scenario_s"] = round(time.perf_counter() - t1, 1)
        print(f"engine.py: {fn.__name__} done in {time.perf_counter() - t1:.1f} s", flush=True)
        out.write_text(json.dumps(results, default=str))
    close_all()


if __name__ == "__main__":
    main()
