"""The ranges and types of every numeric and enumerated config value: one table, :data:`RULES`.

Each stage's ``run(cfg)`` checks its config against the table first
(:func:`mbs.stages.config.validate_config`); a bad value raises :class:`ConfigError` whose
message names the key, the value given and the valid range, and the command line ends with
that message and exit status 2 (``mbs/cli.py``), before any work or any file is written. A rule
is a key pattern (``*`` matches any mapping key or list index) and a check (:class:`Num`,
:class:`OneOf`, :class:`ListOf`). Keys a stage's config does not have are skipped, so one table
serves every stage. Library code checks a value that comes from outside the config with
:func:`check_value` (:data:`THRESHOLD_RANGES` also serves :class:`mbs.synth.settings.Thresholds`).

Every bad value is reported at once (one :class:`ConfigError` naming each), and every backend
node (:data:`BACKEND_NODES`: ``backend``, each student's, teacher's, judge's and evaluated
model's) may hold only the arguments of the class its ``_target_`` names (plus ``label`` and the
other :data:`META_KEYS`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from mbs import errors
from mbs.llm import NON_ARGS
from mbs.records import BANDS


class ConfigError(errors.ConfigError):
    """Config values of the wrong type or out of range; the message names each key and its
    valid range (a :class:`mbs.errors.UserError`: the command ends with the message and exit
    status 2).

    Attributes:
        problems: One line per bad value (the message is the line itself when there is one).
    """

    def __init__(self, problems: str | list[str]):
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        n = len(self.problems)
        super().__init__(self.problems[0] if n == 1 else f"{n} config errors:\n  " + "\n  ".join(self.problems))


@dataclass(frozen=True)
class Num:
    """A number in ``[lo, hi]`` (``lo_open``/``hi_open``: the bound itself is excluded).

    Attributes:
        integer: Only integers (a float with an integral value, e.g. ``8.0``, is accepted).
        lo, hi: Bounds (``None``: unbounded).
        lo_open, hi_open: Exclude the bound.
        nullable: ``null`` is allowed (it means "no limit" / "default" where the key says so).
    """

    integer: bool = False
    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False
    nullable: bool = False

    def describe(self) -> str:
        kind = "an integer" if self.integer else "a number"
        parts = []
        if self.lo is not None:
            parts.append(f"{'>' if self.lo_open else '>='} {self.lo:g}")
        if self.hi is not None:
            parts.append(f"{'<' if self.hi_open else '<='} {self.hi:g}")
        text = kind + (" " + " and ".join(parts) if parts else "")
        return text + (" or null" if self.nullable else "")

    def check(self, value: Any) -> bool:
        if value is None:
            return self.nullable
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if isinstance(value, float) and not math.isfinite(value):
            return False
        if self.integer and isinstance(value, float) and not value.is_integer():
            return False
        if self.lo is not None and (value <= self.lo if self.lo_open else value < self.lo):
            return False
        if self.hi is not None and (value >= self.hi if self.hi_open else value > self.hi):
            return False
        return True


@dataclass(frozen=True)
class OneOf:
    """One of a fixed set of values."""

    values: tuple[Any, ...]

    def describe(self) -> str:
        return "one of " + ", ".join("null" if v is None else str(v) for v in self.values)

    def check(self, value: Any) -> bool:
        return any(value == v and type(value) is type(v) for v in self.values)


@dataclass(frozen=True)
class ListOf:
    """A list whose every item passes ``item`` (``nonempty``: at least one item)."""

    item: Num | OneOf
    nonempty: bool = True

    def describe(self) -> str:
        return f"a {'non-empty ' if self.nonempty else ''}list of {self.item.describe()}"

    def check(self, value: Any) -> bool:
        if not isinstance(value, (list, tuple)):
            return False
        if self.nonempty and not value:
            return False
        return all(self.item.check(v) for v in value)


Check = Num | OneOf | ListOf

COUNT = Num(integer=True, lo=1)  # a count of at least one (N, n, K, ...)
NONNEG = Num(integer=True, lo=0)
BUDGET = Num(integer=True, lo=1)  # a budget L / max_tokens in tokens
SHARE = Num(lo=0, hi=1)  # a rate or threshold in [0, 1]

#: The range of each MagicBeanStalk threshold (:class:`mbs.synth.settings.Thresholds` checks them
#: too). N_d counts retries after the first decomposition try (paper: "up to N_d = 3 retries"): 0
#: is one try.
THRESHOLD_RANGES: dict[str, Num] = {
    "K": COUNT, "D": COUNT, "N_d": NONNEG, "N_t": COUNT, "N_l": COUNT, "N_c": COUNT, "N": COUNT,
    "alpha_leaf": SHARE, "alpha_parent": SHARE,
}
BOOL = OneOf((True, False))
#: The GRPO loss aggregations TRL 1.16's ``GRPOConfig.loss_type`` accepts (its help text lists them).
TRL_LOSS_TYPES = ("grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo", "luspo", "vespo")
#: Which calibrated problems of a run ``mbs-export`` keeps (``export.select``).
EXPORT_SELECTIONS: tuple[str, ...] = ("usable", *BANDS, "all")
#: Figure file formats (matplotlib's ``savefig`` formats for figures).
FIGURE_FORMATS: tuple[str, ...] = ("png", "pdf", "svg", "svgz", "eps", "ps", "pgf", "jpg", "jpeg", "tif", "tiff", "webp")
TEMPERATURE = Num(lo=0)
TOP_P = Num(lo=0, lo_open=True, hi=1)
SECONDS = Num(lo=0, lo_open=True)

#: (key pattern, check). ``*`` matches any mapping key or list index.
RULES: tuple[tuple[str, Check], ...] = (
    ("seed", Num(integer=True)),
    ("log_level", OneOf(("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"))),
    ("shard.index", NONNEG),
    ("shard.count", COUNT),
    # data (also every benchmark's data block)
    ("data.limit", Num(integer=True, lo=0, nullable=True)),
    ("data.on_error", OneOf(("raise", "skip"))),
    ("data.max_prompt_chars", Num(integer=True, lo=1, nullable=True)),
    ("data.heldout_fraction", SHARE),
    ("eval.benchmarks.*.data.limit", Num(integer=True, lo=0, nullable=True)),
    ("eval.benchmarks.*.data.on_error", OneOf(("raise", "skip"))),
    # budgets and thresholds
    ("budget.L", BUDGET),
    ("budget.list", ListOf(BUDGET)),
    *((f"thresholds.{k}", check) for k, check in THRESHOLD_RANGES.items()),
    ("thresholds.N_goose", COUNT),
    # calibration
    ("calibrate.n", COUNT),
    ("calibrate.budgets", ListOf(BUDGET)),
    ("calibrate.temperature", TEMPERATURE),
    ("calibrate.top_p", TOP_P),
    ("calibrate.early_stop.batch", COUNT),
    ("calibrate.early_stop.decision", OneOf(("band", "above_alpha"))),
    ("calibrate.early_stop.alpha", SHARE),
    ("calibrate.hard_seed_budget", Num(integer=True, lo=1, nullable=True)),
    # policies: students, teachers, judges, evaluated models
    ("students.policies.*.budget", Num(integer=True, lo=1, nullable=True)),
    ("students.policies.*.source", OneOf(("live", "recorded"))),
    ("teacher.pool.*.max_tokens", NONNEG),
    ("teacher.pool.*.temperature", TEMPERATURE),
    ("mbs.judges.pool.*.max_tokens", BUDGET),
    ("mbs.judges.pool.*.temperature", TEMPERATURE),
    # synthesis
    ("synth.temperature", TEMPERATURE),
    ("synth.top_p", TOP_P),
    ("synth.early_stop_batch", COUNT),
    ("synth.seeds_limit", Num(integer=True, lo=0, nullable=True)),
    ("mbs.trace_batch", COUNT),
    ("mbs.parents_per_node", COUNT),
    ("mbs.max_chars", COUNT),
    ("mbs.max_answer_chars", COUNT),
    ("mbs.grounding.top_k", COUNT),
    ("direct.n_variants", COUNT),
    ("direct.cost_match_on", OneOf(("all_tokens", "teacher_tokens"))),
    ("direct.cost_match_max_variants", COUNT),
    ("direct.max_chars", COUNT),
    ("direct.max_answer_chars", COUNT),
    ("mbs.trace_context", OneOf(("solution", "reasoning"))),
    ("mbs.restate_similarity", SHARE),
    ("mbs.grounding.retriever", OneOf(("tfidf", "embedding"))),
    ("goose.options", Num(integer=True, lo=2)),
    ("goose.filter.n", COUNT),
    ("goose.filter.budget", Num(integer=True, lo=1, nullable=True)),  # null: the student's budget L
    ("goose.span.max_share", SHARE),
    ("goose.span.recoverable_overlap", SHARE),
    ("goose.on_error", OneOf(("raise", "skip"))),
    ("goose.audit.policy", OneOf(("reject", "rebuild", "report"))),
    ("goose.audit.rebuilds", Num(integer=True, lo=0)),
    ("goose.audit.alpha", Num(lo=0, hi=1)),
    # evaluation
    ("eval.k", COUNT),
    ("eval.budgets", ListOf(BUDGET)),
    ("eval.pass_k", ListOf(COUNT)),
    ("eval.limit", Num(integer=True, lo=0, nullable=True)),
    ("eval.temperature", TEMPERATURE),
    ("eval.top_p", TOP_P),
    # export (every key the stage reads; export.weights and export.runs also by validate_config)
    ("export.include_data", BOOL),
    ("export.select", OneOf(EXPORT_SELECTIONS)),
    ("export.select_budget", Num(integer=True, lo=1, nullable=True)),
    ("export.weights.*", Num(lo=0)),
    ("export.mix.total", Num(integer=True, lo=1, nullable=True)),
    ("export.mix.repeat", BOOL),
    ("export.split.val_fraction", Num(lo=0, hi=1, hi_open=True)),
    ("export.dedup.exact", BOOL),
    ("export.dedup.near.enabled", BOOL),
    ("export.dedup.near.threshold", SHARE),
    ("export.dedup.near.num_perm", COUNT),
    ("export.dedup.near.shingle", COUNT),
    ("export.dedup.near.same_answer_only", BOOL),
    ("export.decontam.enabled", BOOL),
    ("export.decontam.n", COUNT),
    ("export.prompt_length.limit", Num(integer=True, lo=1, nullable=True)),  # null: only measure
    # figures (width: the layout of mbs.figures.WIDTHS_IN; formats: matplotlib's file formats)
    *((f"{node}.width", OneOf(("single", "double"))) for node in ("figures", "eval", "thesis")),
    *((f"{node}.formats.*", OneOf(FIGURE_FORMATS)) for node in ("figures", "eval", "thesis")),
    # the thesis experiment (mbs-thesis): each key in its own name, before anything runs
    ("thesis.data.size", COUNT),
    ("thesis.data.seed", Num(integer=True)),
    ("thesis.data.limit", Num(integer=True, lo=0, nullable=True)),
    ("thesis.n", COUNT),
    ("thesis.budget", BUDGET),
    ("thesis.temperature", TEMPERATURE),
    ("thesis.top_p", TOP_P),
    ("thesis.heldout", COUNT),
    ("thesis.set_size", COUNT),
    ("thesis.seeds", ListOf(Num(integer=True))),
    ("thesis.split_seed", Num(integer=True)),
    ("thesis.steps", COUNT),
    ("thesis.eval_every", COUNT),
    ("thesis.prompts_per_step", COUNT),
    ("thesis.learning_rate", Num(lo=0, lo_open=True)),
    ("thesis.beta", Num(lo=0)),
    ("thesis.loss_type", OneOf(TRL_LOSS_TYPES)),
    ("thesis.eval_k", COUNT),
    ("thesis.extra_budgets", ListOf(BUDGET, nonempty=False)),
    ("thesis.recalibrate", BOOL),
    ("thesis.keep_checkpoints", BOOL),
    ("thesis.keep_final", BOOL),
    ("thesis.batch_size", COUNT),
    ("thesis.dynamic_max_rounds", COUNT),
    ("thesis.screen.size", COUNT),
    ("thesis.primary", ListOf(OneOf(("goldilocks", "trapped", "uncalibrated", "dynamic", "base")))),
    # grading
    ("verifier.workers", Num(integer=True, lo=0, nullable=True)),
    ("verifier.timeout_s", SECONDS),
    ("verifier.wall_timeout_s", Num(lo=0, lo_open=True, nullable=True)),
    # backends (the stage's own and every policy's)
    *(
        (f"{prefix}.{key}", check)
        for prefix in ("backend", "students.policies.*.backend", "teacher.pool.*.backend", "eval.models.*.backend")
        for key, check in (
            ("max_concurrency", COUNT),
            ("timeout_s", SECONDS),
            ("max_retries", NONNEG),
            ("n_ctx", COUNT),
            ("n_batch", COUNT),
            ("n_threads", Num(integer=True, lo=1, nullable=True)),
            ("instances", Num(integer=True, lo=1, nullable=True)),
            ("batch_samples", Num(integer=True, lo=0, hi=256)),
            ("prefix_cache_mib", Num(integer=True, lo=0)),
            ("max_model_len", Num(integer=True, lo=1, nullable=True)),
            ("tensor_parallel_size", COUNT),
            ("gpu_memory_utilization", Num(lo=0, lo_open=True, hi=1)),
            ("batch_size", COUNT),
            ("top_k", Num(integer=True, lo=0)),
            ("min_p", Num(lo=0, hi=1)),
            ("device", OneOf(("auto", "cpu", "cuda"))),
        )
    ),
    # training: the policy (null: the calibrated value) and TRL's trainer
    ("train.engine", OneOf(("verl", "trl"))),
    ("train.launcher", OneOf(("local", "submitit"))),
    *(
        (f"{prefix}.{key}", check)
        for prefix in ("train", "train.uncalibrated")
        for key, check in (
            ("group_size", Num(integer=True, lo=1, nullable=True)),
            ("max_completion_length", Num(integer=True, lo=1, nullable=True)),
            ("temperature", Num(lo=0, nullable=True)),
            ("top_p", Num(lo=0, lo_open=True, hi=1, nullable=True)),
            ("top_k", Num(integer=True, lo=0, nullable=True)),
            ("min_p", Num(lo=0, hi=1, nullable=True)),
            ("reasoning_format", OneOf((None, "auto", "none", "think", "think_open", "harmony", "server"))),
        )
    ),
    ("train.trl.max_steps", COUNT),
    ("train.trl.prompts_per_step", COUNT),
    ("train.trl.gradient_accumulation_steps", COUNT),
    ("train.trl.learning_rate", Num(lo=0, lo_open=True)),
    ("train.trl.beta", Num(lo=0)),
    ("train.trl.loss_type", OneOf(TRL_LOSS_TYPES)),
    ("train.trl.save_steps", COUNT),
    ("train.trl.save_total_limit", Num(integer=True, lo=1, nullable=True)),
    *((f"train.trl.{k}", BOOL) for k in ("resume", "bf16", "use_vllm", "gradient_checkpointing", "progress")),
    ("train.trl.dynamic_sampling.enabled", BOOL),
    ("train.trl.dynamic_sampling.max_rounds", COUNT),
    ("train.allow_policy_mismatch", BOOL),
    # resume
    ("resume.allow_config_change", BOOL),
)

#: The rule of each key of :data:`RULES` (for :func:`check_rule`).
_RULE_OF: dict[str, Check] = dict(RULES)


#: Config nodes that are backends (built with their ``_target_``).
BACKEND_NODES = (
    "backend", "students.policies.*.backend", "teacher.pool.*.backend", "mbs.judges.pool.*.backend",
    "eval.models.*.backend",
)
#: Keys of a backend node that are not constructor arguments (Hydra's and mbs's own).
META_KEYS = frozenset({"_target_", "_convert_", "_recursive_", "_partial_", "_args_", *NON_ARGS})


def check_value(key: str, value: Any, check: Check) -> Any:
    """Check one value (used by library code for values that come from outside the config).

    Returns:
        ``value`` unchanged.

    Raises:
        ConfigError: The value fails ``check`` (names ``key`` and the valid range).
    """
    found = problem(key, value, check)
    if found:
        raise ConfigError(found)
    return value


def plain(node: Any) -> Any:
    """A config node resolved and detached from its config (interpolations replaced by their
    values), still read by attribute like the node (a :class:`DictConfig`/:class:`ListConfig`);
    other values as they are. What typed settings hold of a node a builder reads whole."""
    if isinstance(node, (DictConfig, ListConfig)):
        return OmegaConf.create(OmegaConf.to_container(node, resolve=True))
    return node


def optional_str(value: Any) -> str | None:
    """``value`` as a string, ``None`` kept (an optional path, name or field of the settings)."""
    return None if value is None else str(value)


def check_rule(key: str, value: Any) -> Any:
    """Check one value against the rule :data:`RULES` holds for exactly ``key`` (the typed
    settings' range checks: each range is written once, here).

    Returns:
        ``value`` unchanged.

    Raises:
        ConfigError: The value fails the rule (names ``key`` and the valid range).
        KeyError: No rule is written for ``key`` (a bug: add it to :data:`RULES`).
    """
    return check_value(key, value, _RULE_OF[key])


def problem(key: str, value: Any, check: Check) -> str | None:
    """``<key>=<value>: must be <valid range>`` when ``value`` fails ``check``, else ``None``."""
    return None if check.check(value) else f"{key}={_show(value)}: must be {check.describe()}"


def _show(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, str):
        return repr(value)
    return str(value)
