"""Typed, frozen settings of synthesis, read once from the config with their range checks beside them.

``mbs-synthesize`` builds one :class:`SynthSettings` from the composed config
(:func:`mbs.stages.synthesize.synth_settings`) and hands it to the method; nothing below the stage
reads the config itself. Each class reads its own config node (``from_cfg``) and checks each value it
reads against its rule (:func:`mbs.validate.check_rule`: each range is written once, in
:data:`mbs.validate.RULES`), raising :class:`~mbs.errors.ConfigError` that
names the key. Nodes a builder elsewhere reads as a whole (a backend, the teacher pool, the
verifier) are held resolved and detached from the config (:func:`plain`).

:class:`Thresholds` holds MagicBeanStalk's thresholds (seed paper, "MagicBeanStalk"; defaults in
``conf/thresholds/paper.yaml``): the tree's size (K, D), the tries at each stage (N_t, N_d,
N_l, N_c), the rollouts per calibration (N) and the two filters (alpha_leaf, alpha_parent).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from mbs.calibration.students import StudentSet
from mbs.synth.goose.settings import GooseSettings
from mbs.validate import check_rule, optional_str, plain


@dataclass(frozen=True)
class Thresholds:
    """MagicBeanStalk's thresholds (``thresholds.*``).

    Attributes:
        K: Subproblems per decomposition, at most.
        D: Depth of the decomposition tree, at most.
        N_d: Retries of a failed decomposition (0: one try).
        N_t: Teacher traces tried per seed (Stage 1).
        N_l: Leaf variants per leaf (Stage 3).
        N_c: Compositions tried per parent (Stage 3).
        N: Rollouts of a student per calibration of a candidate.
        alpha_leaf: A leaf variant the weakest student solves above this pass rate is discarded.
        alpha_parent: A composed parent the weakest student solves above this pass rate is discarded.
    """

    K: int
    D: int
    N_d: int
    N_t: int
    N_l: int
    N_c: int
    N: int
    alpha_leaf: float
    alpha_parent: float

    def __post_init__(self) -> None:
        for f in fields(self):
            check_rule(f"thresholds.{f.name}", getattr(self, f.name))

    @classmethod
    def from_cfg(cls, node: Any) -> Thresholds:
        """The thresholds of the ``thresholds`` config node (other keys of the node are left).

        Raises:
            ConfigError: A threshold out of its range (the message names the key).
        """
        return cls(**{f.name: node[f.name] for f in fields(cls)})


@dataclass(frozen=True)
class Sampling:
    """How student rollouts are drawn (``synth.*``, ``seed``, ``paths.cache_dir``).

    Attributes:
        temperature: Sampling temperature of student rollouts.
        top_p: Nucleus sampling mass of student rollouts.
        early_stop: Stop a calibration once its decision is settled (identical decisions).
        early_stop_batch: Rollouts drawn per round with early stopping.
        seed: Base seed; sample ``i`` of a prompt is seeded from ``(seed, i)``.
        cache_dir: The LLM cache folder (``None``: no cache).
    """

    temperature: float
    top_p: float
    early_stop: bool
    early_stop_batch: int
    seed: int
    cache_dir: str | None

    @classmethod
    def from_cfg(cls, synth: Any, seed: Any, cache_dir: Any) -> Sampling:
        """From the ``synth`` node, the run's ``seed`` and ``paths.cache_dir``.

        Raises:
            ConfigError: A value out of its range (names the key).
        """
        return cls(
            temperature=float(check_rule("synth.temperature", synth.temperature)),
            top_p=float(check_rule("synth.top_p", synth.top_p)),
            early_stop=bool(synth.early_stop),
            early_stop_batch=int(check_rule("synth.early_stop_batch", synth.early_stop_batch)),
            seed=int(check_rule("seed", seed)),
            cache_dir=optional_str(cache_dir),
        )


@dataclass(frozen=True)
class SeedInputs:
    """Where a run's hard seeds come from (``calibration_dir``, ``shard``, ``synth.seeds_limit``).

    Attributes:
        calibration_dir: A ``mbs-calibrate`` run directory (``None``: not set; methods that grow
            hard seeds then fail naming the key).
        shard_index, shard_count: This process's shard of the seeds (by a stable hash of the id).
        seeds_limit: At most this many seeds of the shard (``None``: all).
    """

    calibration_dir: str | None
    shard_index: int
    shard_count: int
    seeds_limit: int | None

    @classmethod
    def from_cfg(cls, calibration_dir: Any, shard: Any, synth: Any) -> SeedInputs:
        """From ``calibration_dir``, the ``shard`` node and the ``synth`` node.

        Raises:
            ConfigError: A value out of its range (names the key).
        """
        limit = check_rule("synth.seeds_limit", synth.seeds_limit)
        return cls(
            calibration_dir=str(calibration_dir) if calibration_dir else None,
            shard_index=int(check_rule("shard.index", shard.index)),
            shard_count=int(check_rule("shard.count", shard.count)),
            seeds_limit=None if limit is None else int(limit),
        )


@dataclass(frozen=True)
class CandidateChecks:
    """How a teacher's problem is checked before it is verified (``<method>.*``).

    Attributes:
        max_chars: Longest text (characters) of one field pasted into a prompt.
        max_answer_chars: A longer final answer is rejected as not a final answer.
        self_reference: Regular expressions marking a problem as not self-contained.
    """

    max_chars: int
    max_answer_chars: int
    self_reference: tuple[str, ...]

    @classmethod
    def from_cfg(cls, node: Any, key: str) -> CandidateChecks:
        """From a method node (``mbs`` or ``direct``, named ``key``).

        Raises:
            ConfigError: A value out of its range (names the key).
        """
        return cls(
            max_chars=int(check_rule(f"{key}.max_chars", node.max_chars)),
            max_answer_chars=int(check_rule(f"{key}.max_answer_chars", node.max_answer_chars)),
            self_reference=tuple(str(p) for p in node.self_reference),
        )


@dataclass(frozen=True)
class JudgeSettings:
    """The optional judge pool (``<method>.judges``, ``<method>.templates.judge``).

    Attributes:
        pool: Judge entries in the teacher-pool format (resolved, :func:`plain`); empty: no judging.
        filter: Drop qualified problems every judge rejects.
        template: The judges' prompt template.
    """

    pool: Any
    filter: bool
    template: str

    @classmethod
    def from_cfg(cls, node: Any) -> JudgeSettings:
        """From a method node (``mbs`` or ``direct``)."""
        return cls(pool=plain(node.judges.pool), filter=bool(node.judges.filter), template=str(node.templates.judge))


@dataclass(frozen=True)
class GrowerSettings:
    """What a tree-growing method's candidates need (:class:`mbs.synth.grower.SynthBase`).

    Attributes:
        key: The method's config node (``mbs`` or ``direct``), for messages.
        generator: Teacher-pool entry (by name) that writes problems (``None``: the first live one).
        checks: The candidate checks.
        judges: The judge pool.
    """

    key: str
    generator: str | None
    checks: CandidateChecks
    judges: JudgeSettings

    @classmethod
    def from_cfg(cls, node: Any, key: str) -> GrowerSettings:
        """From a method node (``mbs`` or ``direct``, named ``key``).

        Raises:
            ConfigError: A value out of its range (names the key).
        """
        gen = node.generator
        return cls(key=key, generator=optional_str(gen), checks=CandidateChecks.from_cfg(node, key),
                   judges=JudgeSettings.from_cfg(node))


@dataclass(frozen=True)
class Grounding:
    """Document grounding of MBS's synthetic problems (``mbs.grounding``; :mod:`mbs.synth.grounding`).

    Attributes:
        enabled: Ground each seed's kept synthetic problems on retrieved documents.
        corpus: A JSONL file or a folder of ``.txt``/``.md`` files.
        text_field, id_field: JSONL fields of a document's text and id (``id_field`` ``None``: the line number).
        top_k: K_d, documents retrieved per seed.
        retriever: ``tfidf`` or ``embedding``.
        embedding_model: Local sentence-transformers model folder (``embedding``).
    """

    enabled: bool
    corpus: str | None
    text_field: str
    id_field: str | None
    top_k: int
    retriever: str
    embedding_model: str | None

    @classmethod
    def from_cfg(cls, node: Any) -> Grounding:
        """From the ``mbs.grounding`` node.

        Raises:
            ConfigError: ``top_k`` out of its range.
        """
        return cls(
            enabled=bool(node.enabled), corpus=optional_str(node.corpus),
            text_field=str(node.text_field), id_field=optional_str(node.id_field),
            top_k=int(check_rule("mbs.grounding.top_k", node.top_k)), retriever=str(check_rule("mbs.grounding.retriever", node.retriever)),
            embedding_model=optional_str(node.embedding_model),
        )


@dataclass(frozen=True)
class MbsSettings:
    """MagicBeanStalk's settings (``mbs.*``; the thresholds are :class:`Thresholds`).

    Attributes:
        grower: Generator, candidate checks and judges.
        templates: Prompt template of each teacher step (``trace``, ``decompose``, ``leaf``,
            ``compose``, ``ground``, ``judge``).
        trace_batch: Stage-1 traces drawn per seed and teacher in one round.
        trace_context: ``solution`` or ``reasoning``: what later prompts get of a thinking trace.
        parents_per_node: Composed parents kept per internal node before its trials stop.
        restate_similarity: A subproblem at least this similar to its parent restates it (0..1).
        grounding: Document grounding.
    """

    grower: GrowerSettings
    templates: dict[str, str]
    trace_batch: int
    trace_context: str
    parents_per_node: int
    restate_similarity: float
    grounding: Grounding

    @classmethod
    def from_cfg(cls, node: Any) -> MbsSettings:
        """From the ``mbs`` node.

        Raises:
            ConfigError: A value out of its range (names the key).
        """
        return cls(
            grower=GrowerSettings.from_cfg(node, "mbs"),
            templates={str(k): str(v) for k, v in node.templates.items()},
            trace_batch=int(check_rule("mbs.trace_batch", node.trace_batch)),
            trace_context=str(check_rule("mbs.trace_context", node.trace_context)),
            parents_per_node=int(check_rule("mbs.parents_per_node", node.parents_per_node)),
            restate_similarity=float(check_rule("mbs.restate_similarity", node.restate_similarity)),
            grounding=Grounding.from_cfg(node.grounding),
        )


@dataclass(frozen=True)
class DirectSettings:
    """The direct-prompting baseline's settings (``direct.*``; the keys it shares with ``mbs``
    are resolved from there).

    Attributes:
        grower: Generator, candidate checks and judges.
        variant_template: The variation prompt template.
        n_variants: Variations per seed (per round when cost-matched).
        cost_match_run: An MBS run directory to match the cost of (``None``: not cost-matched).
        cost_match_on: ``all_tokens`` or ``teacher_tokens``.
        cost_match_max_variants: At most this many variations per seed when cost-matching.
    """

    grower: GrowerSettings
    variant_template: str
    n_variants: int
    cost_match_run: str | None
    cost_match_on: str
    cost_match_max_variants: int

    @classmethod
    def from_cfg(cls, node: Any) -> DirectSettings:
        """From the ``direct`` node (interpolations into ``mbs`` resolved).

        Raises:
            ConfigError: A value out of its range (names the key).
        """
        run = node.cost_match_run
        return cls(
            grower=GrowerSettings.from_cfg(node, "direct"),
            variant_template=str(node.templates.variant),
            n_variants=int(check_rule("direct.n_variants", node.n_variants)),
            cost_match_run=str(run) if run else None,
            cost_match_on=str(check_rule("direct.cost_match_on", node.cost_match_on)),
            cost_match_max_variants=int(check_rule("direct.cost_match_max_variants", node.cost_match_max_variants)),
        )


@dataclass(frozen=True)
class SynthSettings:
    """Everything a synthesis method reads, built once by ``mbs-synthesize``
    (:func:`mbs.stages.synthesize.synth_settings`, from each node's ``from_cfg``).

    Attributes:
        method: ``method``.
        sampling: How student rollouts are drawn (seed and LLM cache included).
        inputs: Where the hard seeds come from.
        thresholds: MagicBeanStalk's thresholds.
        thresholds_record: ``thresholds`` as a plain resolved mapping (every key, as the summary records it).
        templates: Prompt template per answer type for student rollouts (``synth.templates``).
        verifier: The ``verifier`` node, resolved (:func:`plain`; :class:`mbs.verify.pool.GradingPool`, ``path``).
        teacher_pool: The ``teacher.pool`` entries, resolved (:func:`plain`).
        students: The student set: its policies and the one target lookup
            (:meth:`~mbs.calibration.students.StudentSet.live_target`).
        mbs, direct, goose: The settings of each built-in method.
        method_config: The selected method's own node (``cfg[method]``), resolved and detached (:func:`plain`), for
            methods registered from outside (``None`` when there is none).
    """

    method: str
    sampling: Sampling
    inputs: SeedInputs
    thresholds: Thresholds
    thresholds_record: dict[str, Any]
    templates: dict[str, str]
    verifier: Any
    teacher_pool: Any
    students: StudentSet
    mbs: MbsSettings
    direct: DirectSettings
    goose: GooseSettings
    method_config: Any = None

    @property
    def cache_dir(self) -> str | None:
        """The LLM cache folder (``paths.cache_dir``)."""
        return self.sampling.cache_dir

    @property
    def seed(self) -> int:
        """The run's base seed."""
        return self.sampling.seed

    @property
    def verifier_path(self) -> Any:
        """``verifier.path``: the verifier a problem without an answer type is graded by."""
        return self.verifier.path
