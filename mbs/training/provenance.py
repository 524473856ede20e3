"""Which policy calibrated an export's rows: recorded by ``mbs-export``, read by ``mbs-train``.

The record is :class:`mbs.runs.policy.CalibratedPolicy` (``PolicyProvenance`` here, its old
name), written and read by the run readers of :mod:`mbs.runs`; this module keeps the names
``mbs-export`` and ``mbs-train`` import and :func:`provenance_of_run`, which picks the reader of a
source's stage:

* a calibrate run (:class:`mbs.runs.calibration.CalibrationSummary`): its target (or
  ``export.select_policy``) at the selection budget, N = ``calibrate.n``,
  ``calibrate.temperature`` / ``calibrate.top_p``;
* a synthesize run (:class:`mbs.runs.synthesis.SynthesisSummary`): the target student its
  problems were qualified for (MBS and direct: ``thresholds.N`` at the student's budget; Golden
  Goose: ``goose.filter.n`` at the filter budget), ``synth.temperature`` / ``synth.top_p``;
* recorded policies (CHAMP's shipped GPT-4 answers), unfiltered Goose items and ``data`` sources
  are recorded as *not trainable* with the reason: no weights of theirs can be trained here.

The backend kind and what it sampled are the ones the source run recorded in ``sampling.json``
(:func:`mbs.runs.policy.policy_of_run`); only a run from before they were recorded has them
derived from its ``config.yaml``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mbs.errors import InputNotFoundError
from mbs.runs.calibration import CalibrationSummary
from mbs.runs.export import ExportProvenance, MissingProvenanceError, policy_block
from mbs.runs.policy import (
    AGREEMENT_KEYS,
    F32_WEIGHTS,
    FILE_WEIGHTS,
    LLAMACPP_SAMPLING,
    CalibratedPolicy,
    distribution_of,
    engine_sampling,
    sampled_distributions,
)
from mbs.runs.synthesis import SynthesisSummary

__all__ = [
    "AGREEMENT_KEYS",
    "F32_WEIGHTS",
    "FILE_WEIGHTS",
    "LLAMACPP_SAMPLING",
    "ExportProvenance",
    "MissingProvenanceError",
    "PolicyProvenance",
    "distribution_of",
    "engine_sampling",
    "policy_block",
    "policy_mismatch",
    "provenance_of_run",
    "sampled_distributions",
]

#: The calibrated policy's record under its old name.
PolicyProvenance = CalibratedPolicy


def policy_mismatch(prov: CalibratedPolicy, engine: str) -> list[str]:
    """How the policy a training engine samples differs from the one that calibrated ``prov``:
    the sampler order and the weights of :meth:`~mbs.runs.policy.CalibratedPolicy.known_differences`
    (a min-p verl does not apply is :func:`mbs.training.verl_command.known_differences`'s).

    TRL samples the trained checkpoint with Hugging Face's order (:data:`mbs.llm.base.SAMPLER_ORDER`),
    a llama.cpp policy as its fp32 de-quantisation (:func:`mbs.llm.hf_checkpoint.trainable_checkpoint`);
    verl's rollout is vLLM (:data:`mbs.llm.base.VLLM_SAMPLER_ORDER`).

    Args:
        prov: The calibrated policy (from the export).
        engine: ``trl`` or ``verl``.

    Returns:
        One sentence per difference (empty: the engine samples what was calibrated, as far as the
        provenance records; an order or weights not recorded count as a difference).
    """
    return [d.text for d in prov.known_differences(engine) if d.key in ("sampler", "weights")]


def provenance_of_run(name: str, run_dir: str | Path, stage: str, selection: Mapping[str, Any] | None = None) -> CalibratedPolicy:
    """The calibrated policy of one export source.

    Args:
        name: The source's name in the export.
        run_dir: Its run folder (``""`` for a ``data`` source).
        stage: The source's stage: ``calibrate``, ``synthesize`` or ``data``.
        selection: A calibrate source's selection (``policy``, ``budget``: what ``mbs-export`` chose).

    Returns:
        Its record (``trainable=False`` with the reason when it names no trainable policy).

    Raises:
        InputNotFoundError: The run folder has no ``config.yaml`` or ``summary.json``.
        mbs.runs.summary.SummaryError: Its summary holds a field of the wrong type (names the file and field).
    """
    if stage == "data":
        return CalibratedPolicy(source=name, run_dir=str(run_dir), stage=stage, trainable=False,
                                why_not="rows of a data config: never calibrated")
    run_dir = Path(run_dir)
    for f in ("config.yaml", "summary.json"):
        if not (run_dir / f).is_file():
            raise InputNotFoundError(f"{run_dir / f} not found: cannot record the policy that calibrated source {name!r}")
    if stage == "calibrate":
        sel = dict(selection or {})
        return CalibrationSummary.read(run_dir).calibrated_policy(name, sel.get("policy") or None, sel.get("budget"))
    return SynthesisSummary.read(run_dir).calibrated_policy(name)
