"""The evaluation run's results, read here from ``mbs-evaluate``'s ``summary.json``
(``results[model][benchmark][budget]``, each cell :meth:`mbs.evaluation.Score.to_dict`).

The figures (:mod:`mbs.figures.evaluation`) and the report's summary (:mod:`mbs.figures.story`)
read them with :meth:`EvaluationSummary.read` (or :meth:`EvaluationSummary.of` on a loaded summary).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mbs.runs.summary import Fields, Record


@dataclass(frozen=True)
class EvalCell:
    """One (model, benchmark, budget L) result.

    Attributes:
        avg: avg@k, mean accuracy over problems and samples, in [0, 1] (``None``: not recorded).
        avg_ci: Its 95% interval ``(lo, hi)`` (``None``: not recorded).
        pass_at: ``{k as written: pass@k}``.
        problems: Problems scored (``None``: not recorded).
        samples: Samples per problem (``None``: not recorded).
        truncated: Samples cut off by L (``None``: not recorded).
        interval: How the interval was computed, in words (``None``: not recorded).
    """

    avg: float | None = None
    avg_ci: tuple[float, ...] | None = None
    pass_at: dict[str, float] = field(default_factory=dict)
    problems: int | None = None
    samples: int | None = None
    truncated: int | None = None
    interval: str | None = None

    @classmethod
    def from_fields(cls, f: Fields) -> EvalCell:
        """One cell.

        Raises:
            SummaryError: A field of the wrong type (names the file and the dotted field).
        """
        return cls(f.num("avg"), f.numbers("avg_ci"), f.tree("pass_at", 1, float), f.opt_int("problems"),
                   f.opt_int("samples"), f.opt_int("truncated"), f.opt_str("interval"))


@dataclass(frozen=True)
class EvaluationSummary(Record):
    """An ``mbs-evaluate`` run's ``summary.json``, read back.

    Attributes:
        k: Samples per problem of avg@k (``None``: not recorded).
        pass_k: The k of each pass@k reported, as strings (``"1"``, ``"4"``).
        models: The models in summary order (the first is the one the others are set against);
            ``models`` where recorded, else the keys of ``results``.
        benchmarks: ``{benchmark key: display name}`` in summary order (``benchmarks``; empty:
            not recorded, the keys of ``results`` are the benchmarks).
        results: ``{model: {benchmark: {budget L as written: cell}}}``.
    """

    STAGE = "evaluate"

    k: int | None = None
    pass_k: tuple[str, ...] = ()
    models: tuple[str, ...] = ()
    benchmarks: dict[str, str] = field(default_factory=dict)
    results: dict[str, dict[str, dict[str, EvalCell]]] = field(default_factory=dict)

    @classmethod
    def from_fields(cls, f: Fields) -> EvaluationSummary:
        """The results of the evaluation summary ``f``.

        Raises:
            SummaryError: A field of the wrong type (names the file and the dotted field).
        """
        pass_k = f.get("pass_k", list, [])
        if not all(isinstance(x, (int, str)) and not isinstance(x, bool) for x in pass_k):
            raise f.error("pass_k", f"expected a list of integers, got {pass_k!r}")
        results = {m: {b: {L: EvalCell.from_fields(c) for L, c in cells.entries().items()}
                       for b, cells in per.entries().items()} for m, per in f.blocks("results").items()}
        names = {key: b.get("name", str, key) for key, b in f.blocks("benchmarks").items()}
        return cls(f.opt_int("k"), tuple(str(x) for x in pass_k), f.strings("models") or tuple(results), names, results)

    @property
    def benchmark_keys(self) -> tuple[str, ...]:
        """Every benchmark scored for some model, in the order first met in ``results``."""
        return tuple(dict.fromkeys(b for per in self.results.values() for b in per))

    def cells(self, model: str, benchmark: str) -> dict[str, EvalCell]:
        """``{budget: cell}`` of ``model`` on ``benchmark`` (empty: not scored)."""
        return self.results.get(model, {}).get(benchmark, {})
