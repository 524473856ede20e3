"""The thesis run's results, read here from ``mbs-thesis``'s ``summary.json`` (written by
:func:`mbs.thesis.summary.summarize`).

The thesis figures (:mod:`mbs.figures.thesis`) and its tables (:mod:`mbs.thesis.table`) read them
with :meth:`ThesisResults.read` (or :meth:`ThesisResults.of` on a loaded summary). Numbers keep
the type they were written with; accuracies and shares are fractions in [0, 1]; contrasts are
differences of avg@k in accuracy units (not points).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mbs.runs.summary import Fields, Record


def _pair(f: Fields, key: str) -> tuple[float, float] | None:
    """An interval ``[lo, hi]`` at ``key`` (``None``: missing or ``null``)."""
    value = f.numbers(key, 2)
    return None if value is None else (value[0], value[1])


@dataclass(frozen=True)
class Accuracy:
    """Held-out avg@k of one arm at one step or budget, over its seeds.

    Attributes:
        mean: avg@k, mean over seeds (a fraction).
        ci: 95% interval over seeds and problems (``None``: not recorded).
        seed_band: 95% t interval over the seeds' means (``None``: not recorded).
        seeds: The training seeds behind it.
        rollouts_drawn: Training rollouts drawn by that step, mean over seeds (``None``: not recorded).
        problems: Held-out problems behind it (``None``: not recorded).
        seed_means: Each seed's avg@k, in the order of ``seeds`` (empty: not recorded).
        completion_tokens: Mean completion length in tokens (``None``: not recorded).
        clipped: Share of completions cut at the budget (``None``: not recorded).
        drawn_seeds: Each seed's training rollouts drawn by that step, in the order of ``seeds``
            (empty: not recorded).
    """

    mean: float
    ci: tuple[float, float] | None = None
    seed_band: tuple[float, float] | None = None
    seeds: tuple[int, ...] = ()
    rollouts_drawn: float | None = None
    problems: int | None = None
    seed_means: tuple[float, ...] = ()
    completion_tokens: float | None = None
    clipped: float | None = None
    drawn_seeds: tuple[float, ...] = ()

    @classmethod
    def from_fields(cls, f: Fields) -> Accuracy:
        """One cell of ``curves`` or ``final``.

        Raises:
            SummaryError: ``mean`` missing, or a field of the wrong type (names the file and field).
        """
        return cls(f.get("mean", float), _pair(f, "ci"), _pair(f, "seed_band"), f.ints("seeds"), f.num("rollouts_drawn"),
                   f.opt_int("problems"), f.numbers("seed_means") or (), f.num("completion_tokens_mean"), f.num("truncated_share"),
                   f.numbers("rollouts_drawn_seeds") or ())


@dataclass(frozen=True)
class Construct:
    """What an arm's held-out rewards measured at the final step and L (issue 43's construct validity).

    Attributes:
        samples: Held-out samples graded (problems x k x seeds).
        rewarded: Those rewarded.
        routes: ``{extraction route: rewarded samples}`` (``answer tag``, ``boxed``, ``last number``).
        strict: avg@k when only an answer in the answer tag counts (``None``: not recorded).
        by_level: ``{Reasoning Gym level: avg@k on its held-out problems}``.
        by_band: ``{calibrated band: avg@k on its held-out problems}``.
        by_task: ``{task: avg@k on its held-out problems}``.
    """

    samples: int
    rewarded: int
    routes: dict[str, int] = field(default_factory=dict)
    strict: Accuracy | None = None
    by_level: dict[str, Accuracy] = field(default_factory=dict)
    by_band: dict[str, Accuracy] = field(default_factory=dict)
    by_task: dict[str, Accuracy] = field(default_factory=dict)

    @classmethod
    def from_fields(cls, f: Fields) -> Construct:
        """One arm of ``construct_validity``.

        Raises:
            SummaryError: ``samples`` or ``rewarded`` missing, or a field of the wrong type (names the file and field).
        """
        def cells(key: str) -> dict[str, Accuracy]:
            return {name: Accuracy.from_fields(cell) for name, cell in f.blocks(key).items()}

        strict = f.block("strict")
        return cls(f.get("samples", int), f.get("rewarded", int), f.tree("routes", 1, int),
                   Accuracy.from_fields(strict) if strict.data else None, cells("by_level"), cells("by_band"), cells("by_task"))


@dataclass(frozen=True)
class ZeroStd:
    """An arm's zero-std groups: observed against the calibration's forecast.

    Attributes:
        observed_n: Groups logged (``None``: not recorded).
        observed_value: Their zero-std share (``None``: no group logged).
        observed_ci: Its Wilson interval (``None``: not recorded).
        expected_share: The forecast share (``None``: no forecast).
        interval: The forecast's interval for the arm's steps (``None``: no forecast).
        per_step_interval: The forecast's interval for one step (``None``: no forecast).
        level: The forecast interval's level (``None``: no forecast).
        per_seed: ``{seed: {step: observed share}}``, as written.
    """

    observed_n: int | None = None
    observed_value: float | None = None
    observed_ci: tuple[float, float] | None = None
    expected_share: float | None = None
    interval: tuple[float, float] | None = None
    per_step_interval: tuple[float, float] | None = None
    level: float | None = None
    per_seed: dict[str, dict[str, float]] = field(default_factory=dict)

    @property
    def has_forecast(self) -> bool:
        """Whether the summary holds a forecast for the arm."""
        return self.expected_share is not None

    @classmethod
    def from_fields(cls, f: Fields) -> ZeroStd:
        """One arm of ``zero_std``.

        Raises:
            SummaryError: A field of the wrong type (names the file and the dotted field).
        """
        obs, fc = f.block("observed"), f.block("forecast")
        return cls(obs.opt_int("n"), obs.num("value"), _pair(obs, "ci"), fc.num("expected_share"), _pair(fc, "interval"),
                   _pair(fc, "per_step_interval"), fc.num("level"), f.tree("per_seed", 2, float))


@dataclass(frozen=True)
class Contrast:
    """A paired contrast ``A - B`` of two arms' held-out avg@k at L, at the seed level.

    Attributes:
        difference: Mean difference over seeds (accuracy units).
        ci: 95% interval over seeds x problems.
        t_ci_seeds: 95% t interval over the seeds' differences.
        sign_flip_p: The sign-flip permutation test's p over seeds.
        p_holm: Holm-corrected p (``None``: the primary contrast, not corrected).
        a_better_seeds: Seeds where A scored higher.
        b_better_seeds: Seeds where B scored higher.
        seeds: The seeds paired.
        problems: Held-out problems.
        seeds_needed_80: Seeds for 80% power at the measured spread (``None``: none or not recorded).
        contrast: ``"A - B"`` where the record names it (the primary and per-task ones).
    """

    difference: float
    ci: tuple[float, float]
    t_ci_seeds: tuple[float, float]
    sign_flip_p: float
    a_better_seeds: int
    b_better_seeds: int
    seeds: tuple[int, ...]
    problems: int
    p_holm: float | None = None
    seeds_needed_80: int | None = None
    contrast: str | None = None

    @classmethod
    def from_fields(cls, f: Fields) -> Contrast:
        """One contrast.

        Raises:
            SummaryError: A field missing or of the wrong type (names the file and the dotted field).
        """
        ci, t_ci = _pair(f, "ci"), _pair(f, "t_ci_seeds")
        if ci is None or t_ci is None:
            raise f.error("ci" if ci is None else "t_ci_seeds", "missing")
        return cls(f.get("difference", float), ci, t_ci, f.get("sign_flip_p", float), f.get("a_better_seeds", int),
                   f.get("b_better_seeds", int), f.ints("seeds"), f.get("problems", int), f.num("p_holm"),
                   f.opt_int("seeds_needed_80"), f.opt_str("contrast"))


@dataclass(frozen=True)
class ThesisResults(Record):
    """An ``mbs-thesis`` run's ``summary.json``, read back: what its figures and tables draw.

    Attributes:
        budget: The budget L (tokens).
        eval_k: Samples per held-out problem (avg@k).
        n: Completions per group N (``None``: not recorded).
        prompts_per_step: Groups per optimizer step (``None``: not recorded).
        extra_budgets: The other budgets the final policies were evaluated at.
        curves: ``{arm: {step as written: accuracy at L}}``.
        final: ``{arm: {budget as written: accuracy}}`` (``base``: the untrained model).
        zero_std: ``{arm: zero-std groups}``.
        migration: ``{arm: {"seeds": [...], "calibration_to_trained": {band: {band: problems}}, ...}}``,
            as written (empty: no re-calibration).
        primary: The primary contrast (``None``: not computed).
        secondary: ``{"A - B": contrast}``, Holm-corrected.
        by_task: ``{task: the primary contrast on that task's held-out problems}``.
        construct: ``{arm: what its rewards measured}`` (``base``: the untrained model).
    """

    STAGE = "thesis"

    budget: int
    eval_k: int
    n: int | None = None
    prompts_per_step: int | None = None
    extra_budgets: tuple[int, ...] = ()
    curves: dict[str, dict[str, Accuracy]] = field(default_factory=dict)
    final: dict[str, dict[str, Accuracy]] = field(default_factory=dict)
    zero_std: dict[str, ZeroStd] = field(default_factory=dict)
    migration: dict[str, dict] = field(default_factory=dict)
    primary: Contrast | None = None
    secondary: dict[str, Contrast] = field(default_factory=dict)
    by_task: dict[str, Contrast] = field(default_factory=dict)
    construct: dict[str, Construct] = field(default_factory=dict)

    @classmethod
    def from_fields(cls, f: Fields) -> ThesisResults:
        """The results of the thesis summary ``f``.

        Raises:
            SummaryError: ``budget`` or ``eval_k`` missing, or a field of
                the wrong type (names the file and the dotted field).
        """
        def accuracies(key: str) -> dict[str, dict[str, Accuracy]]:
            return {arm: {name: Accuracy.from_fields(cell) for name, cell in block.entries().items()}
                    for arm, block in f.blocks(key).items()}

        tests = f.block("contrasts")
        primary = tests.block("primary")
        return cls(
            f.get("budget", int), f.get("eval_k", int), f.opt_int("n"), f.opt_int("prompts_per_step"),
            f.ints("extra_budgets"), accuracies("curves"), accuracies("final"),
            {arm: ZeroStd.from_fields(z) for arm, z in f.blocks("zero_std").items()},
            {arm: dict(m.data) for arm, m in f.blocks("migration").items()},
            Contrast.from_fields(primary) if primary.data else None,
            {key: Contrast.from_fields(t) for key, t in tests.blocks("secondary").items()},
            {task: Contrast.from_fields(t) for task, t in tests.blocks("by_task").items()},
            {arm: Construct.from_fields(c) for arm, c in f.blocks("construct_validity").items()},
        )
