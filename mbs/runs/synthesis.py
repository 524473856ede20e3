"""The synthesis run's contract: the ``method``, the ``target`` (MBS and direct) or the difficulty
``filter`` (Golden Goose) of its ``summary.json``, written and read here.

MBS and direct write :func:`target_block` (:func:`mbs.synth.run.setup_summary`); Golden Goose
writes ``filter`` (:func:`filter_block`). Export and training read them with
:meth:`SynthesisSummary.read` to name the policy the problems were qualified for
(:meth:`SynthesisSummary.calibrated_policy`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from mbs.runs.calibration import _config, _templates
from mbs.runs.policy import CalibratedPolicy, policy_of_run
from mbs.runs.summary import load_summary

STAGE = "synthesize"


def target_block(policy: str, budget: int | None, n: int) -> dict[str, Any]:
    """The ``target`` block of an MBS or direct summary: the student problems are qualified for,
    at L = ``budget`` tokens with N = ``n`` rollouts."""
    return {"policy": policy, "budget": budget, "n": n}


@dataclass(frozen=True)
class QualifiedFor:
    """The policy a synthesis run qualified its problems for.

    Attributes:
        policy: The student's name (``None``: not recorded).
        budget: L in tokens (``None``: not recorded).
        n: N rollouts per problem (``None``: not recorded).
        filtered: ``False`` for Golden Goose items kept without the difficulty filter (never calibrated).
    """

    policy: str | None
    budget: int | None
    n: int | None
    filtered: bool = True


@dataclass(frozen=True)
class SynthesisSummary:
    """A synthesis run's ``summary.json``, read back.

    Attributes:
        run_dir: The run folder.
        method: ``mbs``, ``direct``, ``goose`` (``synthesis`` when not recorded).
        qualified_for: The policy its problems were qualified for (Golden Goose: its filter's).
    """

    run_dir: str
    method: str
    qualified_for: QualifiedFor

    @classmethod
    def read(cls, run_dir: str | os.PathLike) -> SynthesisSummary:
        """Read a synthesis run's summary.

        Raises:
            SummaryError: No ``summary.json``, another stage's, or a field of the wrong type
                (names the file and the field).
        """
        f = load_summary(run_dir, STAGE)
        if f.has("filter"):  # Golden Goose: the difficulty filter calibrated the items
            block = f.block("filter")
            q = QualifiedFor(block.opt_str("policy"), block.opt_int("budget"), block.opt_int("n"),
                             filtered=bool(block.get("enabled", bool, False)))
        else:
            block = f.block("target")
            q = QualifiedFor(block.opt_str("policy"), block.opt_int("budget"), block.opt_int("n"))
        return cls(str(run_dir), f.get("method", str, "synthesis"), q)

    def templates(self) -> dict[str, str] | None:
        """The prompt templates the run used per answer type (``synth.templates``; ``None``: not recorded).

        Raises:
            SummaryError: The run folder has no ``config.yaml``.
        """
        return _templates(_config(self.run_dir), "synth.templates")

    def calibrated_policy(self, source: str) -> CalibratedPolicy:
        """The policy the problems were qualified for, as the export source ``source``.

        Raises:
            SummaryError: The run folder has no ``config.yaml``.
        """
        base = {"source": source, "run_dir": self.run_dir, "stage": STAGE}
        q = self.qualified_for
        if not q.filtered:
            return CalibratedPolicy(source=source, run_dir=self.run_dir, stage=STAGE, trainable=False,
                                    why_not="Golden Goose items without the difficulty filter: never calibrated")
        return policy_of_run(base, self.run_dir, _config(self.run_dir), q.policy, q.budget, q.n, "synth")
