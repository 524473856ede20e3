"""``backend=vllm`` end to end on vLLM's CPU build: the embedded SmolLM2-135M-Instruct converted to a
Hugging Face checkpoint, one engine for the whole module (``scripts/engine.py`` in ``.venv-vllm``).

Stages (calibrate with early stopping off and on, an identical rerun, a run that fails halfway and
resumes; evaluate; Golden Goose with vLLM as student), seeds, the sampling parameters vLLM applies,
faults, and the one-policy check: the tokens vLLM keeps at the first step are the ones the
transformers backend keeps, on the same prompts from the same weights.
"""

from __future__ import annotations

import json

import pytest
from support.vllm_runtime import scenario

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

#: Largest difference allowed between vLLM's and the transformers backend's probability of a kept token.
PROB_TOL = 1e-3


@pytest.fixture(scope="module")
def results(engine_results) -> dict:
    return engine_results


def _stats(backends: dict) -> dict:
    (stats,) = backends.values()
    return stats


def test_calibrate_two_budgets_early_stopping_on_and_off_same_decisions(results):
    cal = scenario(results, "calibrate")
    full, es = cal["full"], cal["es"]
    assert len(full["decisions"]) == 6 * 2  # 6 problems x 2 budgets
    assert full["decisions"].keys() == es["decisions"].keys()
    for key, (band, usable, n, _) in full["decisions"].items():
        assert n == 4 and [band, usable] == es["decisions"][key][:2], key
    assert {json.loads(k)[2] for k in full["rollouts"]} == {32, 64}  # the rollout key holds the budget
    assert all(r["tokens"] <= json.loads(k)[2] for k, r in full["rollouts"].items())
    assert any(r["finish"] == "length" for r in full["rollouts"].values())
    stats = _stats(full["backends"])
    assert stats["samples"] == 48 and stats["model_id"].startswith("hf@sha256:")
    # a sample does not depend on how its request was split: every rollout early stopping drew is
    # the full run's rollout of the same key
    assert es["rollouts"] and all(es["rollouts"][k]["text"] == full["rollouts"][k]["text"] for k in es["rollouts"])
    assert _stats(es["backends"])["samples"] == len(es["rollouts"]) <= 48


def test_identical_rerun_makes_no_engine_call(results):
    cal = scenario(results, "calibrate")
    stats = _stats(cal["again"]["backends"])
    assert (stats["calls"], stats["samples"], stats["cache_hits"]) == (0, 0, 48)
    assert cal["again"]["rollouts"] == cal["full"]["rollouts"]


def test_failed_run_resumes_without_drawing_a_sample_twice(results):
    res = scenario(results, "resume")
    assert "simulated kill" in res["first_error"]
    assert 0 < res["drawn_first"] < res["drawn_total"]
    assert res["distinct"] == res["drawn_total"]  # no sample asked of the engine twice
    assert res["drawn_total"] == len(res["rollouts"])  # and every one asked for is a rollout
    cal = scenario(results, "calibrate")
    assert len(res["decisions"]) == 6 and all(res["decisions"][k] == cal["es"]["decisions"][k] for k in res["decisions"])
    assert all(r["text"] == cal["full"]["rollouts"][k]["text"] for k, r in res["rollouts"].items())


def test_evaluate(results):
    ev = scenario(results, "evaluate")
    cell = ev["summary"]["embedded"]["champ_heldout"]["32"]
    assert cell["samples"] == 2 and 0.0 <= cell["avg"] <= 1.0
    assert len(ev["rollouts"]) == 4 and all(r["tokens"] <= 32 for r in ev["rollouts"].values())
    assert _stats(ev["backends"])["samples"] == 4
    again = _stats(ev["again"]["backends"])
    assert (again["calls"], again["samples"], again["cache_hits"]) == (0, 0, 4)


def test_synthesis_with_vllm_as_student(results):
    syn = scenario(results, "synthesize")
    assert syn["items_built"] == 1 and syn["rejected"] == {}
    assert len(syn["rollouts"]) == 2
    assert all(r["reward"] in (0.0, 1.0) and 0 < r["tokens"] <= 8 for r in syn["rollouts"].values())
    assert syn["backends"]["embedded"]["samples"] == 2
    assert syn["student"]["accuracy"] == sum(r["reward"] for r in syn["rollouts"].values()) / 2


def test_same_seed_same_samples_in_any_split(results):
    s = scenario(results, "seeds")
    assert len(set(s["first"])) > 1  # four samples at T=1 differ from each other
    assert s["again"] == s["first"] and s["split"] == s["first"] and s["mixed"] == s["first"]
    assert s["indices"] == [0, 1, 2, 3]
    assert s["reseeded"] != s["first"]


def test_vllm_applies_the_sampling_parameters_mbs_sends(results):
    from mbs.llm.base import sample_seed

    s = scenario(results, "sampling")
    assert [p["seed"] for p in s["sent"]] == [sample_seed(3, 5), sample_seed(3, 6)]
    for p in s["sent"]:
        assert p["cls"].startswith("vllm.") and p["cls"].endswith("SamplingParams")
        assert (p["n"], p["temperature"], p["top_p"], p["top_k"], p["min_p"], p["max_tokens"], p["stop"]) == (
            1, 0.7, 0.9, 5, 0.1, 16, ["\n"])
    # stop strings: vLLM ended each response on the space (its own stop_reason), mbs keeps no space
    assert [o["stop_reason"] for o in s["stop"]["vllm"]] == [" "] * 3
    assert all(" " not in t for t in s["stop"]["texts"]) and s["stop"]["finish"] == ["stop"] * 3
    # max_tokens: cut at the budget
    assert s["cut"] == [[7, "length"]] * 3
    # temperature 0 is greedy; top_k=1, min_p=1 and a tiny top_p each leave only the top token at T=1
    greedy = s["greedy"]
    assert len(set(greedy)) == 1
    for name in ("top_k=1", "min_p=1", "top_p=1e-6"):
        assert s["one_top"][name] == greedy, name
    assert s["one_top"]["unfiltered"] != greedy


def test_faults_name_the_setting_and_cache_nothing(results):
    f = scenario(results, "faults")
    for name in ("prompt_too_long", "budget_too_long"):
        assert "backend.max_model_len=1024" in f[name]["error"], f[name]
        assert f[name]["cached"] == 0 and f[name]["then"] > 0  # nothing cached; the engine still serves
    assert "backend.model=no-such-org/no-such-model" in f["hub_name_offline"]["error"]
    assert f["bad_path"]["type"] == "InputNotFoundError" and "backend.model=" in f["bad_path"]["error"]
    kv = scenario(results, "small_kv")
    assert kv["message"] and "backend.kv_cache_memory_bytes=1048576" in kv["message"] and "failed to start" in kv["message"]


def test_one_policy_vllm_keeps_the_transformers_backends_tokens(results):
    """Issue 47's kept-token check with vLLM as a third engine: at the first generated step of 24
    prompts, vLLM's processed logprobs (after temperature, min-p, top-k, top-p) keep the same token
    set as the transformers backend's warpers on the same checkpoint, with the same probabilities.
    Settings where vLLM's order draws the same distribution (``same_distribution``)."""
    torch = pytest.importorskip("torch")
    from mbs.llm.base import SAMPLER_ORDER, VLLM_SAMPLER_ORDER, same_distribution
    from mbs.llm.transformers_backend import TransformersBackend, _RowSampler

    op = scenario(results, "one_policy")
    hf = TransformersBackend(model=results["checkpoint"])
    model = hf._load()
    worst, sizes = 0.0, []
    try:
        for i, msgs in enumerate(op["prompts"]):
            ids = hf.prompt_tokens(msgs)
            assert ids == op["prompt_ids"][i], msgs[-1]["content"][:60]
            with torch.no_grad():
                logits = model(torch.tensor([ids])).logits[0, -1].float()
            for (temperature, top_p, top_k, min_p), kept in zip(op["settings"], op["kept"]):
                assert same_distribution(SAMPLER_ORDER, VLLM_SAMPLER_ORDER, top_p, min_p)
                scores = logits[None] / temperature
                for warper in _RowSampler([0], temperature, top_p, top_k, min_p).warpers:
                    scores = warper(torch.zeros((1, 1), dtype=torch.long), scores)
                probs = torch.softmax(scores.double(), dim=-1)[0]
                theirs = {int(t): float(probs[t]) for t in torch.nonzero(probs > 0).flatten().tolist()}
                ours = {int(t): p for t, p in kept[i].items()}
                assert len(ours) < 64  # vLLM returned every kept token (at most 64 asked for)
                assert set(ours) == set(theirs), (msgs[-1]["content"][:60], sorted(set(ours) ^ set(theirs)))
                worst = max(worst, max(abs(ours[t] - theirs[t]) for t in ours))
                sizes.append(len(ours))
    finally:
        hf.close()
    print(f"\none policy, vLLM vs transformers: {len(sizes)} comparisons, kept {min(sizes)}-{max(sizes)} tokens, "
          f"largest probability difference {worst:.2e}")
    assert worst < PROB_TOL, worst
    assert max(sizes) > 1
