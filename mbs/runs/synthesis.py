"""The synthesis run's contract: the ``method``, the ``target`` (MBS and direct) or the difficulty
``filter`` (Golden Goose) of its ``summary.json``, written and read here.

MBS and direct write :func:`target_block` (:func:`mbs.synth.run.setup_summary`); Golden Goose
writes ``filter`` (:func:`filter_block`). Export and training read them with
:meth:`SynthesisSummary.read` to name the policy the problems were qualified for
(:meth:`SynthesisSummary.calibrated_policy`). The figures and the report read what an MBS or
direct run found (yield, funnel, rejections, teacher tokens) through :class:`SynthesisResults`;
Golden Goose's findings are :class:`mbs.runs.goose.GooseSummary`'s.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from mbs.runs.calibration import _config, _templates
from mbs.runs.policy import CalibratedPolicy, policy_of_run
from mbs.runs.summary import Fields, Record, load_summary

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


@dataclass(frozen=True)
class PathTotals:
    """``paths.<path>`` of an MBS summary: what the seeds grown one way (``decomposed`` or
    ``root_only``) gave.

    Attributes:
        qualified_problems: Qualified problems from those seeds.
        teacher_tokens: Teacher completion tokens spent on them.
    """

    qualified_problems: int = 0
    teacher_tokens: int = 0


@dataclass(frozen=True)
class SynthesisResults(Record):
    """What an MBS or direct synthesis run found, as the figures and the report draw it. Keys
    missing in older runs read as ``None`` or empty; numbers stay as written (an ``int`` is not
    turned into a ``float``), so tables print them the same.

    Attributes:
        method: ``mbs`` or ``direct`` (``None``: not recorded).
        cost_match: The cost-matched direct baseline's ``cost_match`` block (empty: not cost-matched).
        hard_seeds: Hard seeds the run started from.
        seeds_with_trace: Of them, with a verified trace.
        seeds_qualified: Of them, with >= 1 qualified problem.
        yield_share: ``yield``: ``seeds_qualified / hard_seeds``, in [0, 1].
        yield_by_path: ``{"decomposed": share, "root_only": share}`` of MBS (``None``: not MBS, or older).
        paths: Per path (``decomposed``, ``root_only``), its qualified problems and teacher tokens.
        qualified_problems: Qualified problems in all.
        qualified_per_seed: Qualified problems per hard seed, in ``seed_ids`` order.
        seed_ids: The hard seeds' ids (``None``: not recorded, so seeds cannot be paired).
        funnel: Counts through each stage; ``funnel_order`` is their order (empty: the funnel's own).
        rejections: Candidates rejected, by ``<stage>/<reason>``.
        teacher_tokens: Teacher completion tokens (``None``: not recorded).
        teacher_tokens_per_qualified: Teacher tokens per qualified problem (``None``: nothing qualified).
        student_rollouts: Student rollouts drawn (``None``: not recorded).
        all_tokens: Every completion token, teacher and student (``None``: not recorded).
        teachers: The teacher pool's labels.
        teacher_models: ``model_id`` of each ``teacher:*`` backend.
    """

    STAGE = "synthesize"

    method: str | None = None
    cost_match: dict[str, Any] = field(default_factory=dict)
    hard_seeds: int | None = None
    seeds_with_trace: int | None = None
    seeds_qualified: int | None = None
    yield_share: float | None = None
    yield_by_path: dict[str, float] | None = None
    paths: dict[str, PathTotals] = field(default_factory=dict)
    qualified_problems: int | None = None
    qualified_per_seed: tuple[int, ...] = ()
    seed_ids: tuple[str, ...] | None = None
    funnel: dict[str, int] = field(default_factory=dict)
    funnel_order: tuple[str, ...] = ()
    rejections: dict[str, int] = field(default_factory=dict)
    teacher_tokens: int | None = None
    teacher_tokens_per_qualified: float | None = None
    student_rollouts: int | None = None
    all_tokens: int | None = None
    teachers: tuple[str, ...] = ()
    teacher_models: tuple[str, ...] = ()

    @classmethod
    def from_fields(cls, f: Fields) -> SynthesisResults:
        """The results of the synthesis summary ``f``.

        Raises:
            SummaryError: A field of the wrong type (names the file and the dotted field).
        """
        per_seed = f.ints("qualified_per_seed")
        paths = {name: PathTotals(p.get("qualified_problems", int, 0), p.get("teacher_tokens", int, 0))
                 for name, p in f.blocks("paths").items()}
        backends = f.block("backends")
        models = tuple(str(backends.block(k).data.get("model_id", "")) for k in backends.data
                       if str(k).startswith("teacher:") and isinstance(backends.data[k], dict))
        return cls(
            method=f.opt_str("method"), cost_match=f.mapping("cost_match"), hard_seeds=f.opt_int("hard_seeds"),
            seeds_with_trace=f.opt_int("seeds_with_trace"), seeds_qualified=f.opt_int("seeds_qualified"),
            yield_share=f.num("yield"), yield_by_path=f.tree("yield_by_path", 1, float) if f.has("yield_by_path") else None,
            paths=paths, qualified_problems=f.opt_int("qualified_problems"), qualified_per_seed=per_seed,
            seed_ids=f.strings("seed_ids") if f.has("seed_ids") else None,
            funnel=f.tree("funnel", 1, int), funnel_order=f.strings("funnel_order"), rejections=f.tree("rejections", 1, int),
            teacher_tokens=f.opt_int("teacher_tokens"), teacher_tokens_per_qualified=f.num("teacher_tokens_per_qualified"),
            student_rollouts=f.opt_int("student_rollouts"), all_tokens=f.opt_int("all_tokens"),
            teachers=tuple(str(t) for t in f.get("teachers", list, [])), teacher_models=models,
        )

    @property
    def funnel_rows(self) -> list[tuple[str, int]]:
        """``(stage, count)`` in the funnel's order."""
        order = self.funnel_order or tuple(self.funnel)
        return [(k, self.funnel[k]) for k in order if k in self.funnel]
