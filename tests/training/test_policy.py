"""Train exactly the policy that was calibrated: provenance read from run folders, resolution
against ``train.*``, refusals that name both values, overrides recorded, and the verl command
carrying the calibrated sampling and chat-template arguments. No model is loaded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf
from support.exports import HF_POLICY, write_export
from support.verl import override_problems, trainer_config, verl_package_dir

from mbs.errors import ConfigError
from mbs.llm.hf_checkpoint import file_sha256
from mbs.llm.llamacpp import embedded_model_path
from mbs.stages.train import run, settings_of
from mbs.training.checkpoints import (
    COMPLETE,
    drop_after,
    is_complete,
    mark_complete,
    remove_incomplete_after,
    rotate,
)
from mbs.training.policy import resolve_policy
from mbs.training.provenance import (
    ExportProvenance,
    MissingProvenanceError,
    PolicyProvenance,
    provenance_of_run,
)
from mbs.training.trl_engine import Reward, batch_sizes, last_checkpoint
from mbs.training.verl_command import build_command, known_differences, verl_overrides


#: How mbs's llama.cpp engine samples since issue 47 (an export's provenance of a calibration run now).
LLAMACPP_NOW = {"sampler": "temperature, top_k, top_p, min_p", "weights": "f32 (de-quantised GGUF)"}


def _run_dir(make_cfg, tmp_path, name: str, overrides: list[str], summary: dict) -> Path:
    """A run folder holding the composed calibrate config and ``summary``."""
    d = tmp_path / name
    d.mkdir()
    OmegaConf.save(make_cfg("calibrate", overrides, out=name), d / "config.yaml", resolve=False)
    (d / "summary.json").write_text(json.dumps({"stage": "calibrate", **summary}))
    return d


def test_calibrate_run_records_the_embedded_gguf_and_llamacpps_sampling(make_cfg, tmp_path):
    d = _run_dir(make_cfg, tmp_path, "cal", ["calibrate.n=4", "calibrate.temperature=0.6"],
                 {"target_policy": "smollm2-135m-instruct", "hard_seed_budget": 128})
    p = provenance_of_run("calibrate_difficulty", d, "calibrate", {"policy": "smollm2-135m-instruct", "budget": 128})
    assert p.trainable and p.backend == "llamacpp" and p.embedded
    assert p.model == str(embedded_model_path()) and p.model_sha256 == file_sha256(embedded_model_path())
    assert (p.budget, p.n, p.temperature, p.top_p, p.top_k, p.min_p) == (128, 4, 0.6, 1.0, 40, 0.05)
    assert p.reasoning_format == "auto" and p.chat_template_kwargs == {} and p.effort is None
    assert PolicyProvenance.from_dict(json.loads(json.dumps(p.to_dict()))) == p


def test_qwen3_without_thinking_keeps_its_template_switch(make_cfg, tmp_path):
    d = _run_dir(make_cfg, tmp_path, "cal", ["backend=vllm", "backend.model=Qwen/Qwen3-1.7B", "reasoning=qwen3_no_thinking"],
                 {"target_policy": "Qwen/Qwen3-1.7B", "hard_seed_budget": 256})
    p = provenance_of_run("calibrate", d, "calibrate")
    assert p.trainable and p.backend == "vllm" and p.model == "Qwen/Qwen3-1.7B" and p.model_sha256 is None
    assert p.chat_template_kwargs == {"enable_thinking": False} and p.reasoning_format == "think"
    assert (p.top_k, p.min_p) == (None, None)  # vLLM's own defaults: not known here


def test_recorded_answers_are_not_a_trainable_policy(make_cfg, tmp_path):
    d = _run_dir(make_cfg, tmp_path, "rec", ["students=champ_recorded"], {"target_policy": "GPT-4 Turbo", "hard_seed_budget": None})
    p = provenance_of_run("calibrate_recorded", d, "calibrate")
    assert not p.trainable and p.backend == "recorded" and "recorded answers of GPT-4 Turbo" in p.why_not
    export = write_export(tmp_path / "export", p.to_dict())
    cfg = make_cfg("train", [f"train.data_dir={export}"])
    with pytest.raises(MissingProvenanceError, match=r"no source names a trainable calibrated policy.*train.override=\[model\]"):
        resolve_policy(settings_of(cfg), convert=False)
    # an explicit model trains, with the uncalibrated settings, every one recorded as an override
    cfg = make_cfg("train", [f"train.data_dir={export}", "train.model=Qwen/Qwen3-0.6B", "train.override=[model]"])
    pol = resolve_policy(settings_of(cfg), convert=False)
    assert pol.model == "Qwen/Qwen3-0.6B" and pol.provenance is None
    assert (pol.group_size, pol.max_completion_length) == (8, 256)  # train.uncalibrated: thresholds.N, budget.L
    assert pol.overrides["model"] == {"calibrated": None, "used": "Qwen/Qwen3-0.6B"}
    assert pol.overrides["group_size"] == {"calibrated": None, "used": 8}
    # with nothing calibrated, an explicit value is taken as given (and recorded)
    cfg = make_cfg("train", [f"train.data_dir={export}", "train.model=Qwen/Qwen3-0.6B", "train.override=[model]", "train.group_size=4"])
    assert resolve_policy(settings_of(cfg), convert=False).overrides["group_size"] == {"calibrated": None, "used": 4}


def test_an_export_from_before_provenance_names_both_fixes(make_cfg, tmp_path):
    export = write_export(tmp_path / "old", policy=False)
    cfg = make_cfg("train", [f"train.data_dir={export}"])
    with pytest.raises(MissingProvenanceError, match=r"re-export the runs with mbs-export, or name the policy yourself"):
        run(cfg)
    ok = make_cfg("train", [f"train.data_dir={export}", "train.model=Qwen/Qwen3-0.6B", "train.override=[model]", "train.dry_run=true"],
                  out="ok")
    assert json.loads((run(ok) / "summary.json").read_text())["policy"]["model"] == "Qwen/Qwen3-0.6B"


def test_defaults_train_the_calibrated_policy_and_a_mismatch_is_refused(make_cfg, tmp_path):
    export = write_export(tmp_path / "export")
    base = [f"train.data_dir={export}"]
    pol = resolve_policy(settings_of(make_cfg("train", base)), convert=False)
    assert (pol.model, pol.group_size, pol.max_completion_length, pol.temperature, pol.top_p) == ("Qwen/Qwen3-1.7B", 8, 256, 1.0, 1.0)
    assert pol.overrides == {}
    # asking for the calibrated value is no mismatch
    same = resolve_policy(settings_of(make_cfg("train", base + ["train.group_size=8", "train.temperature=1"])), convert=False)
    assert same.overrides == {}
    for key, value, shown in (("temperature", "0.7", "0.7"), ("group_size", "16", "16"), ("max_completion_length", "512", "512"),
                              ("model", "Qwen/Qwen3-8B", "'Qwen/Qwen3-8B'"), ("top_k", "20", "20"),
                              ("chat_template_kwargs", "{enable_thinking: false}", '{"enable_thinking": false}')):
        with pytest.raises(ConfigError, match=rf"train.{key}={shown}: the data was calibrated with {key}=.*train.override=\[{key}\]"):
            resolve_policy(settings_of(make_cfg("train", base + [f"train.{key}={value}"])), convert=False)
    pol = resolve_policy(settings_of(make_cfg("train", base + ["train.temperature=0.7", "train.override=[temperature]"])), convert=False)
    assert pol.temperature == 0.7 and pol.overrides == {"temperature": {"calibrated": 1.0, "used": 0.7}}
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['temp'\]"):
        resolve_policy(settings_of(make_cfg("train", base + ["train.override=[temp]"])), convert=False)
    # the override reaches summary.json
    out = run(make_cfg("train", base + ["train.temperature=0.7", "train.override=[temperature]", "train.dry_run=true"]))
    assert json.loads((out / "summary.json").read_text())["overrides"] == {"temperature": {"calibrated": 1.0, "used": 0.7}}


def test_sources_calibrated_differently_are_refused_by_name(make_cfg, tmp_path):
    export = write_export(tmp_path / "export", {**HF_POLICY, "source": "calibrate_live"},
                          {**HF_POLICY, "source": "calibrate_difficulty", "budget": 128, "temperature": 0.6},
                          {**HF_POLICY, "source": "synthesize_goose", "n": 16, "rows": 0})  # no rows: constrains nothing
    with pytest.raises(ConfigError, match=r"budget, temperature differ.*calibrate_live: .*L=256.*calibrate_difficulty: .*L=128.*"
                                          r"train.calibration=SOURCE"):
        resolve_policy(settings_of(make_cfg("train", [f"train.data_dir={export}"])), convert=False)
    pol = resolve_policy(settings_of(make_cfg("train", [f"train.data_dir={export}", "train.calibration=calibrate_difficulty"])),
                         convert=False)
    assert (pol.max_completion_length, pol.temperature) == (128, 0.6)
    assert "calibrate_live" in pol.other_sources and "budget (256)" in pol.other_sources["calibrate_live"]
    assert "synthesize_goose" not in pol.other_sources
    with pytest.raises(ConfigError, match=r"train.calibration='nope': not a source"):
        ExportProvenance.from_export(export).choose("nope")


def test_a_gguf_policy_trains_its_converted_checkpoint(make_cfg, models_dir, tmp_path):
    gguf = embedded_model_path()
    calibrated = {**HF_POLICY, "backend": "llamacpp", "model": str(gguf), "model_sha256": file_sha256(gguf), "embedded": True,
                  "top_k": 40, "min_p": 0.05, **LLAMACPP_NOW}
    export = write_export(tmp_path / "export", calibrated)
    pol = resolve_policy(settings_of(make_cfg("train", [f"train.data_dir={export}"])), convert=False)
    assert pol.model == str(models_dir / "hf" / file_sha256(gguf)[:16]) and pol.gguf == str(gguf)  # trainable_checkpoint's folder
    assert (pol.top_k, pol.min_p) == (40, 0.05)
    # the GGUF itself names the calibrated model; another file does not
    same = resolve_policy(settings_of(make_cfg("train", [f"train.data_dir={export}", f"train.model={gguf}"])), convert=False)
    assert same.overrides == {}
    other = tmp_path / "other.gguf"
    other.write_bytes(b"GGUF other weights")
    with pytest.raises(ConfigError, match=r"train.model='.*other.gguf': the data was calibrated with model='sha256:"):
        resolve_policy(settings_of(make_cfg("train", [f"train.data_dir={export}", f"train.model={other}"])), convert=False)
    # the calibrated file replaced by other weights: refused by hash
    moved = write_export(tmp_path / "moved", {**calibrated, "embedded": False, "model": str(other)})
    with pytest.raises(ConfigError, match=r"other.gguf is not the GGUF that calibrated calibrate"):
        resolve_policy(settings_of(make_cfg("train", [f"train.data_dir={moved}"])), convert=False)


def test_verl_command_carries_the_calibrated_sampling_and_template_args(make_cfg, tmp_path):
    gguf = embedded_model_path()
    export = write_export(tmp_path / "export", {**HF_POLICY, "reasoning_format": "think", "chat_template_kwargs": {"enable_thinking": False},
                                                "top_k": 20, "temperature": 0.7, "top_p": 0.8, "budget": 512, "n": 4})
    cfg = make_cfg("train", [f"train.data_dir={export}"])
    pairs = dict(verl_overrides(settings_of(cfg)))
    assert pairs["actor_rollout_ref.model.path"] == "Qwen/Qwen3-1.7B"
    assert (pairs["actor_rollout_ref.rollout.n"], pairs["data.max_response_length"]) == (4, 512)
    assert (pairs["actor_rollout_ref.rollout.temperature"], pairs["actor_rollout_ref.rollout.top_p"]) == (0.7, 0.8)
    assert pairs["actor_rollout_ref.rollout.top_k"] == 20
    assert pairs["+data.apply_chat_template_kwargs"] == {"enable_thinking": False}  # "+": verl's default is {}
    assert override_problems(list(pairs.items()), trainer_config(verl_package_dir())) == []
    argv = build_command(settings_of(cfg))
    arg = next(a for a in argv if a.startswith("+data.apply_chat_template_kwargs="))
    assert arg == "+data.apply_chat_template_kwargs={enable_thinking:false}"
    assert OverridesParser.create().parse_overrides([arg])[0].value() == {"enable_thinking": False}
    assert argv[-1] == "+reward.custom_reward_function.reward_kwargs.reasoning_format=think"
    # a policy key set in the verl recipe is refused: it comes from the calibration
    with pytest.raises(ConfigError, match=r"train.verl.actor_rollout_ref.rollout.temperature=0.5: mbs-train fills it"):
        verl_overrides(settings_of(make_cfg("train", [f"train.data_dir={export}",
                                                      "train.verl.actor_rollout_ref.rollout.temperature=0.5"])))
    # llama.cpp's min-p has no verl key: a known difference, said out loud
    llama = write_export(tmp_path / "llama", {**HF_POLICY, "backend": "llamacpp", "model": str(gguf), "embedded": True,
                                              "model_sha256": file_sha256(gguf), "top_k": 40, "min_p": 0.05, **LLAMACPP_NOW})
    pol = resolve_policy(settings_of(make_cfg("train", [f"train.data_dir={llama}"])), convert=False)
    assert dict(verl_overrides(settings_of(make_cfg("train", [f"train.data_dir={llama}"])), pol))["actor_rollout_ref.rollout.top_k"] == 40
    assert "verl 0.9.1's rollout config has no min-p" in known_differences(pol)[0]


def test_trl_batches_and_checkpoints(tmp_path):
    assert batch_sizes(1, 8, 1) == 8 and batch_sizes(2, 4, 2) == 4
    with pytest.raises(ConfigError, match=r"prompts_per_step=1 x group size 6 = 6 completions per step do not split"):
        batch_sizes(1, 6, 4)
    ck = tmp_path / "checkpoints"
    for step in (1, 2, 3, 4):
        (ck / f"checkpoint-{step}").mkdir(parents=True)
        (ck / f"checkpoint-{step}" / "trainer_state.json").write_text("{}")
        (ck / f"checkpoint-{step}" / "model.safetensors").write_text("weights")
        if step < 3:
            mark_complete(ck / f"checkpoint-{step}", step)
    (ck / "checkpoint-4" / COMPLETE).write_text('{"step": 4, "files": {"model.safetensors": 9, "trainer_state.json": 2}}')
    # 3: all files but no sentinel (killed before it); 4: a listed file shorter than listed (cut short)
    assert last_checkpoint(ck) == ck / "checkpoint-2" and last_checkpoint(tmp_path / "none") is None
    assert [is_complete(ck / f"checkpoint-{s}") for s in (1, 2, 3, 4)] == [True, True, False, False]
    assert rotate(ck, 1) == [str(ck / "checkpoint-1")] and (ck / "checkpoint-3").is_dir()  # never an incomplete one
    assert remove_incomplete_after(ck, 2) == [str(ck / "checkpoint-3"), str(ck / "checkpoint-4")]
    assert sorted(p.name for p in ck.iterdir()) == ["checkpoint-2"]
    log = tmp_path / "metrics.jsonl"
    log.write_text('{"step": 1}\n{"step": 2}\n{"step": 3}\n{"step": 4, "los')  # a torn last line
    assert drop_after(log, 2) == 2 and log.read_text() == '{"step": 1}\n{"step": 2}\n'


def test_trl_reward_is_compute_score_on_the_assistant_text(tmp_path, monkeypatch):
    monkeypatch.setenv("MBS_REWARD_WORKERS", "0")
    log = tmp_path / "completions.jsonl"
    reward = Reward("think", 8, log)
    scores = reward(
        prompts=[[{"role": "user", "content": "2+3?"}]] * 3,
        completions=[[{"role": "assistant", "content": "<think>hm</think>\\boxed{5}"}],
                     [{"role": "assistant", "content": "<think>so \\boxed{5}"}],  # cut off while thinking
                     [{"role": "assistant", "content": "\\boxed{4}"}]],
        completion_ids=[[1] * 5, [1] * 8, [1] * 3], data_source=["mbs/math/toy"] * 3,
        reward_model=[{"ground_truth": "5", "style": "rule"}] * 3, extra_info=[{"id": "toy", "verifier": "math"}] * 3,
    )
    assert scores == [1.0, 0.0, 0.0] and reward.__name__ == "compute_score"
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    assert [x["clipped"] for x in lines] == [False, True, False] and "cut off while thinking" in lines[1]["reason"]


def test_sampling_records_state_the_distribution_training_samples(make_cfg):
    """Issue 29: every backend's rollouts are drawn from a stated distribution (engine defaults
    included), and the record says what each trainer reproduces of it."""
    from mbs.training.provenance import distribution_of, sampled_distributions

    cfg = make_cfg("calibrate", ["calibrate.temperature=0.6"])
    [(name, dist)] = sampled_distributions(cfg.students.policies, cfg.calibrate.temperature, cfg.calibrate.top_p).items()
    assert name == "smollm2-135m-instruct"
    assert {k: dist[k] for k in ("backend", "temperature", "top_p", "top_k", "min_p")} == {
        "backend": "llamacpp", "temperature": 0.6, "top_p": 1.0, "top_k": 40, "min_p": 0.05}
    assert "min_p=0.05" in dist["trainers"]["verl"] and dist["trainers"]["trl"].startswith("the same")
    tf = distribution_of({"_target_": "mbs.llm.transformers_backend.TransformersBackend", "top_k": 0, "min_p": 0.0}, 1.0, 0.9)
    assert (tf["backend"], tf["top_p"], tf["top_k"], tf["min_p"]) == ("transformers", 0.9, None, None)
    assert tf["trainers"]["verl"].startswith("the same") and tf["sampler"] == "temperature, top_k, top_p, min_p"
    # issue 47: the embedded policy samples temperature first on its fp32 de-quantisation, what TRL trains
    assert (dist["sampler"], dist["weights"]) == ("temperature, top_k, top_p, min_p", "f32 (de-quantised GGUF)")
    stored = distribution_of({"_target_": "mbs.llm.llamacpp.LlamaCppBackend", "weights": "file"}, 0.6, 1.0)
    assert stored["trainers"]["trl"].startswith("differs: calibration ran the GGUF as stored")
    # a GGUF calibrated with a transformers checkpoint's filters records them, not llama.cpp's defaults
    tk = distribution_of({"_target_": "mbs.llm.transformers_backend.TransformersBackend", "top_k": 40, "min_p": 0.05}, 0.6, 1.0)
    assert (tk["top_k"], tk["min_p"]) == (40, 0.05)
    assert sampled_distributions(make_cfg("calibrate", ["students=champ_recorded"]).students.policies, 1.0, 1.0) == {}


def test_llamacpp_calibrated_untruncated_trains_with_verl_without_a_difference(make_cfg, tmp_path):
    """Issue 29: backend.top_k=0 backend.min_p=0 calibrates the untruncated distribution that
    verl (no min-p) and TRL both sample; the default keeps llama.cpp's 40 / 0.05 and its cache key."""
    from mbs.llm.llamacpp import LlamaCppBackend
    from mbs.training.policy import TrainPolicy

    d = _run_dir(make_cfg, tmp_path, "cal", ["calibrate.n=4", "backend.top_k=0", "backend.min_p=0"],
                 {"target_policy": "smollm2-135m-instruct", "hard_seed_budget": 128})
    p = provenance_of_run("calibrate", d, "calibrate")
    assert (p.top_k, p.min_p) == (None, None)
    untruncated = TrainPolicy(model="m", group_size=4, max_completion_length=128, temperature=1.0, top_p=1.0,
                              top_k=p.top_k, min_p=p.min_p, reasoning_format="auto", chat_template_kwargs={})
    assert known_differences(untruncated) == []
    assert "min_p" not in LlamaCppBackend().cache_params and "top_k" not in LlamaCppBackend().cache_params
    assert {k: LlamaCppBackend(top_k=0, min_p=0.0).cache_params[k] for k in ("top_k", "min_p")} == {"top_k": 0, "min_p": 0.0}
    with pytest.raises(ValueError, match="backend.min_p"):
        LlamaCppBackend(min_p=1.5)


def test_a_policy_calibrated_by_another_distribution_is_refused_unless_allowed(make_cfg, tmp_path):
    """Issue 47: a calibration by llama-cpp-python's temperature-last chain on the Q4_1 file (every
    llama.cpp run before it) is another policy than TRL trains; refused by name, trained only when
    told train.allow_policy_mismatch=true, and then recorded."""
    gguf = embedded_model_path()
    old = {**HF_POLICY, "backend": "llamacpp", "model": str(gguf), "model_sha256": file_sha256(gguf), "embedded": True,
           "top_k": 40, "min_p": 0.05, "temperature": 0.6}
    export = write_export(tmp_path / "old", old)
    with pytest.raises(ConfigError, match=r"trl would train another policy.*order \[top_k, typical_p, top_p, min_p, "
                                          r"temperature\].*the GGUF as stored.*train.allow_policy_mismatch=true"):
        resolve_policy(settings_of(make_cfg("train", [f"train.data_dir={export}", "train.engine=trl"])), convert=False)
    pol = resolve_policy(settings_of(make_cfg("train", [f"train.data_dir={export}", "train.engine=trl",
                                                        "train.allow_policy_mismatch=true"])), convert=False)
    assert len(pol.mismatch) == 2 and pol.summary()["mismatch"] == list(pol.mismatch)
    # calibrated as this mbs calibrates: temperature first, on the fp32 de-quantisation: nothing to refuse
    d = _run_dir(make_cfg, tmp_path, "cal", ["calibrate.n=4", "calibrate.temperature=0.6"],
                 {"target_policy": "smollm2-135m-instruct", "hard_seed_budget": 48})
    now = provenance_of_run("calibrate", d, "calibrate")
    assert (now.sampler, now.weights) == ("temperature, top_k, top_p, min_p", "f32 (de-quantised GGUF)")
    fresh = write_export(tmp_path / "new", {**now.to_dict(), "rows": 1})
    assert resolve_policy(settings_of(make_cfg("train", [f"train.data_dir={fresh}", "train.engine=trl"])), convert=False).mismatch == ()
    # vLLM applies min-p before top-p: the same distribution unless both are on
    from mbs.training.provenance import policy_mismatch

    vllm = PolicyProvenance(**{**HF_POLICY, "min_p": 0.05, "top_p": 0.9})
    assert policy_mismatch(vllm, "trl") and not policy_mismatch(PolicyProvenance(**{**HF_POLICY, "min_p": 0.05}), "trl")
