"""Typed records that flow between stages, with one schema version.

Every stage reads and writes these records as JSONL shards (see :mod:`mbs.io`). Only
:func:`to_dict` / :func:`from_dict` convert between records and plain dicts; nothing else
in the code base builds record dicts by hand.

Record types:

* :class:`Problem`: one problem with its ground truth and answer type.
* :class:`Rollout`: one sampled response of a policy to a problem under a budget L.
* :class:`Calibration`: the per-(problem, policy, budget) summary of N rollouts.
* :class:`TreeNode`: one node of a MagicBeanStalk decomposition tree (:class:`NodeStatus`), with
  its effectivity test (:class:`Effectivity`) and synthetic candidates (:class:`Candidate`, :class:`Status`).
* :class:`MCQ`: one Golden Goose fill-in-the-middle multiple-choice item.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol, TypedDict

from mbs.errors import UserError

#: Bumped whenever a field is added, removed or changes meaning.
#: 2: rollouts keep the policy's reasoning (``reasoning``, ``reasoning_tokens``) beside the answer;
#: tree nodes keep a thinking teacher's Stage-1 reasoning (``trace_reasoning``).
SCHEMA_VERSION = 2

#: Bands of the zero-advantage trap (seed paper, "Background"): all N rollouts correct,
#: mixed (non-zero GRPO advantage), or all wrong.
BANDS = ("solved_all", "goldilocks", "failed_all")

class Graded(Protocol):
    """What calibration reads of a graded rollout: a :class:`Rollout`, or a
    :class:`mbs.calibration.grouping.Outcome` (the same attributes without the text)."""

    @property
    def problem_id(self) -> str: ...
    @property
    def policy(self) -> str: ...
    @property
    def budget(self) -> int | None: ...
    @property
    def sample_index(self) -> int: ...
    @property
    def reward(self) -> float | None: ...
    @property
    def finish_reason(self) -> str | None: ...
    @property
    def completion_tokens(self) -> int: ...
    @property
    def complete_correct(self) -> bool: ...


def rollout_key(r: Any) -> tuple:
    """(problem, policy, budget, sample) of a rollout or anything with those attributes."""
    return (r.problem_id, r.policy, r.budget, r.sample_index)


def is_complete_correct(r: Any) -> bool:
    """Correct and complete within L (reward 1.0, finish reason ``stop``): the seed paper's usability rule."""
    return r.reward == 1.0 and r.finish_reason == "stop"


def reason_kind(reason: str | None) -> str:
    """The category of a grading or rejection reason: the text before its first colon
    (``"answer mismatch: ..."`` -> ``"answer mismatch"``; none -> ``"none"``)."""
    return (reason or "none").split(":")[0].strip() or "none"


class RecordError(UserError, ValueError):
    """A record dict is missing a field or has a field of the wrong kind."""


@dataclass
class Problem:
    """A problem with a verifiable answer.

    Attributes:
        id: Stable identifier, unique within a run (e.g. ``champ/P_Combinatorics_1``).
        data_source: Name written into exported rows, ``mbs/<verifier>/<origin>``.
        prompt: The problem statement shown to the policy (plain text / LaTeX).
        ground_truth: The answer the verifier checks against (LaTeX for ``math``, a letter
            for ``mcq``); ``None`` when the answer is not auto-verifiable.
        answer_type: ``math`` or ``mcq``, or ``unverifiable:<why>`` for answers that no
            verifier can check (prose, proofs, ...). Names the verifier for ``math``/``mcq``.
        reference_solution: Optional worked solution (a verified trace for MBS stage 1).
        metadata: Free-form source fields (category, hints, concepts, raw answer, ...).
        parents: Provenance: ids of the problems this one was derived from.
    """

    id: str
    data_source: str
    prompt: str
    ground_truth: str | None
    answer_type: str = "math"
    reference_solution: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    parents: list[str] = field(default_factory=list)

    @property
    def verifiable(self) -> bool:
        """True when a verifier can grade responses to this problem."""
        return self.ground_truth is not None and not self.answer_type.startswith("unverifiable")


@dataclass
class Rollout:
    """One sampled response of policy ``policy`` to problem ``problem_id`` under budget L.

    Attributes:
        problem_id: :attr:`Problem.id`.
        policy: Student/policy name from the ``students`` config group.
        budget: Response budget L in tokens (``max_tokens``); ``None`` for recorded answers.
        sample_index: 0-based index among the N rollouts of this (problem, policy, budget).
        text: The response's final answer (what the verifier graded; for a reasoning model the
            part after its thinking, ``""`` when the budget ran out inside the thinking).
        prompt_tokens: Prompt length in tokens (0 when unknown).
        completion_tokens: Generated tokens, reasoning and answer together (<= budget L).
        finish_reason: ``stop`` (ended on its own) or ``length`` (hit the budget L).
        reward: 1.0, 0.0, or ``None`` when the verifier could not grade.
        extracted: The answer the verifier extracted, if any.
        reason: The verifier's reason for the reward.
        latency_s: Wall-clock seconds the backend spent on this sample (0 for cache hits).
        cached: True when the completion came from the LLM cache.
        setting: For recorded policies, the prompt setting the answer was recorded under.
        reasoning: The policy's thinking (see :mod:`mbs.reasoning`); ``""`` when it does not think.
        reasoning_tokens: Tokens of the thinking (part of ``completion_tokens``).
    """

    problem_id: str
    policy: str
    budget: int | None
    sample_index: int
    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str = "stop"
    reward: float | None = None
    extracted: str | None = None
    reason: str = ""
    latency_s: float = 0.0
    cached: bool = False
    setting: str | None = None
    reasoning: str = ""
    reasoning_tokens: int = 0

    @property
    def key(self) -> tuple:
        """Identity used to resume and deduplicate: (problem, policy, budget, sample)."""
        return rollout_key(self)

    @property
    def complete_correct(self) -> bool:
        """Correct and complete within L (finish reason ``stop``), seed paper's usability rule."""
        return is_complete_correct(self)


@dataclass
class Calibration:
    """Pass rate and trap band of one problem for one (policy, budget L).

    Attributes:
        problem_id: :attr:`Problem.id`.
        policy: Policy name.
        budget: Budget L in tokens, ``None`` for recorded answers.
        n: Rollouts drawn (may be < ``n_target`` with early stopping).
        n_target: Rollouts the configuration asked for (N).
        successes: Rollouts with reward 1.
        ungraded: Rollouts the verifier could not grade (counted as failures).
        pass_rate: successes / n.
        band: ``solved_all``, ``goldilocks`` or ``failed_all`` (for N rollouts; with early
            stopping this is the band drawing all N would give).
        complete_correct: At least one correct rollout finished with ``stop`` within L.
        truncated: Rollouts that hit the budget (finish reason ``length``).
        completion_tokens: Tokens generated over all drawn rollouts.
        early_stopped: True when sequential early stopping settled the decision before N.
        pass_rate_est: Unbiased pass rate under the early-stopping rule the group was drawn
            under (:mod:`mbs.calibration.estimate`; s/n without early stopping); ``None`` in
            records written before it existed, or for a group cut short of what its rule needs.
    """

    problem_id: str
    policy: str
    budget: int | None
    n: int
    n_target: int
    successes: int
    ungraded: int
    pass_rate: float
    band: str
    complete_correct: bool
    truncated: int = 0
    completion_tokens: int = 0
    early_stopped: bool = False
    pass_rate_est: float | None = None

    @property
    def key(self) -> tuple:
        return (self.problem_id, self.policy, self.budget)

    @property
    def usable(self) -> bool:
        """Goldilocks band and a complete correct response within L (seed paper)."""
        return self.band == "goldilocks" and self.complete_correct


class NodeStatus(StrEnum):
    """Where a :class:`TreeNode` stands (a ``str``: written to JSON as its value, equal to it when read back).

    ``new`` (just created), ``verified`` (has a verified trace, being grown), then finally
    ``no_trace`` (root without a verified trace), ``synthesized`` (kept at least one synthetic
    problem) or ``exhausted`` (``reject_reason`` says why).
    """

    NEW = "new"
    VERIFIED = "verified"
    NO_TRACE = "no_trace"
    SYNTHESIZED = "synthesized"
    EXHAUSTED = "exhausted"


class Status(StrEnum):
    """Where a synthetic candidate (:class:`Candidate`) or a subproblem (:class:`Subproblem`) stands
    (a ``str``: written to JSON as its value, equal to it when read back)::

        pending -> rejected                  (parse error, self-reference, duplicate, answer mismatch)
        pending -> valid -> discarded        (the weakest student solves it above alpha; Stage 3)
                         -> kept -> qualified | unqualified   (target calibration, judges)
    """

    PENDING = "pending"
    REJECTED = "rejected"
    VALID = "valid"
    DISCARDED = "discarded"
    KEPT = "kept"
    QUALIFIED = "qualified"
    UNQUALIFIED = "unqualified"


#: Candidates that passed the weakest-student filter (synthetic problems of the tree).
KEPT = (Status.KEPT, Status.QUALIFIED, Status.UNQUALIFIED)
#: Candidates that did not become qualified problems and say why in ``reason``.
REJECTIONS = (Status.REJECTED, Status.DISCARDED, Status.UNQUALIFIED)

# The synthesis records below are JSON objects (``TypedDict``s), not dataclasses: their keys are
# written in the order they are set, which differs by path (a qualified candidate's ``reason`` comes
# after its ``target``, a discarded one's after its ``filter``; a parse error has no ``problem``), so
# the trees files keep their bytes and a resumed run reads earlier records back unchanged.


class Subproblem(TypedDict, total=False):
    """One subproblem of a Stage-2 decomposition attempt (``EffectivityAttempt.subproblems``).

    Attributes:
        index: Position in the teacher's decomposition.
        problem: Problem text (absent when it did not parse).
        solution: The teacher's solution.
        answer: Its final answer.
        status: ``pending``, then ``valid`` or ``rejected`` (:class:`Status`).
        reason: Why it was rejected.
    """

    index: int
    problem: str
    solution: str
    answer: str
    status: Status
    reason: str | None


class Candidate(Subproblem, total=False):
    """One synthetic candidate problem (:attr:`TreeNode.variants`; keys in the order they are set).

    Besides a :class:`Subproblem`'s keys (``index``: the teacher sample index):

    Attributes:
        id: Candidate id (also the id of its :class:`Problem` and rollout group).
        kind: What made it (``direct``, ``leaf_variant``, ``composed``).
        tokens: Completion tokens of the teacher sample.
        finish_reason: ``stop`` or ``length``.
        parents: Ids of the problems it was grown from.
        node_id: Tree node it belongs to.
        children: The child candidates a composed parent was made from.
        raw: The clipped teacher sample (parse errors only).
        filter: The weakest-student check (policy, budget, alpha, successes, pass rate, above).
        target: The target calibration (:class:`Calibration` as a dict).
        judges: Per judge verdicts; ``judge_verdict``: accepted, rejected or none.
        grounding: Document grounding (MBS with ``mbs.grounding.enabled``).
    """

    id: str
    kind: str
    tokens: int
    finish_reason: str
    parents: list[str]
    node_id: str
    children: list[str]
    raw: str
    filter: dict[str, Any]
    target: dict[str, Any]
    judges: dict[str, Any]
    judge_verdict: str
    grounding: dict[str, Any]


class StudentEffect(TypedDict):
    """One live student's side of an effectivity test: acc(S, p) against acc_cond(S, p | subproblems).

    Attributes:
        acc: Pass rate of the problem alone (unbiased under early stopping).
        acc_source: ``calibration`` (the calibration run's) or ``measured`` (drawn here with all N).
        acc_n: Rollouts behind ``acc``.
        acc_cond: Pass rate with the valid subproblems shown as worked examples.
        n: Rollouts drawn for ``acc_cond``; ``n_target``: N.
        successes: Correct ones of them.
        passed: ``acc_cond`` settled above ``acc``.
    """

    acc: float | None
    acc_source: str
    acc_n: int
    acc_cond: float | None
    n: int
    n_target: int
    successes: int
    passed: bool


class EffectivityAttempt(TypedDict, total=False):
    """One decomposition attempt of Stage 2 (keys in the order they are set).

    Attributes:
        attempt: 0 for the first try, then the retries up to N_d.
        tokens: Completion tokens of the teacher sample.
        finish_reason: ``stop`` or ``length``.
        subproblems: What the teacher proposed, each with its status.
        students: Per live student, the effectivity test (absent when no subproblem was valid).
        passed: Some student's ``acc_cond`` exceeds its ``acc``.
        reason: Why the attempt failed.
        raw: The clipped teacher sample (parse errors only).
    """

    attempt: int
    tokens: int
    finish_reason: str
    subproblems: list[Subproblem]
    students: dict[str, StudentEffect]
    passed: bool
    reason: str
    raw: str


class Effectivity(TypedDict, total=False):
    """The effectivity test of a tree node (:attr:`TreeNode.effectivity`); empty for a node Stage 2
    never reached (a root without a verified trace).

    Attributes:
        passed: A decomposition passed (``None`` at the depth limit D: none was tried).
        students: The per-student results of the deciding (last) attempt.
        attempts: Every attempt, in order.
        leaf_reason: Why the node is a leaf (``None`` when it was decomposed).
    """

    passed: bool | None
    students: dict[str, StudentEffect]
    attempts: list[EffectivityAttempt]
    leaf_reason: str | None


@dataclass
class TreeNode:
    """One node of a MagicBeanStalk tree (seed paper, Stages 2 and 3).

    Attributes:
        node_id: Unique id, ``<seed id>/<path>`` (e.g. ``champ/P_1/0.2``).
        seed_id: Root problem id.
        depth: 0 for the root, up to D.
        problem: The node's problem.
        trace: Verified solution trace (teacher or reference): the teacher's written solution
            (the final answer of its response).
        trace_reasoning: The thinking that preceded ``trace`` when the teacher is a reasoning
            model (:mod:`mbs.synth.traces`: later prompts receive it with
            ``mbs.trace_context=reasoning``), else ``None``.
        answer: Verified final answer.
        children: Child node ids (K <= 3).
        effectivity: The node's effectivity test (:class:`Effectivity`).
        variants: Synthetic problems grown from this node with their calibration (:class:`Candidate`).
        status: See :class:`NodeStatus`.
        reject_reason: Why the node is ``no_trace`` or ``exhausted``, if it is.
    """

    node_id: str
    seed_id: str
    depth: int
    problem: Problem
    trace: str | None = None
    answer: str | None = None
    children: list[str] = field(default_factory=list)
    effectivity: Effectivity = field(default_factory=Effectivity)
    variants: list[Candidate] = field(default_factory=list)
    status: NodeStatus = NodeStatus.NEW
    reject_reason: str | None = None
    trace_reasoning: str | None = None


@dataclass
class MCQ:
    """A Golden Goose fill-in-the-middle multiple-choice item.

    Attributes:
        id: Item id.
        source_id: Id of the passage it was built from.
        masked_passage: The passage with the removed span replaced by ``[MASK]``.
        span: The removed span (the correct option's text).
        span_offsets: (start, end) character offsets of the span in the source passage.
        distractors: Wrong options, each with its origin in ``distractor_origins``.
        options: All options in presented order.
        answer: The correct option's letter (``A``.. ).
        distractor_origins: How each distractor was made (perturbation kind, real wrong step, teacher).
        checks: Validation checks passed, name -> bool.
    """

    id: str
    source_id: str
    masked_passage: str
    span: str
    span_offsets: tuple[int, int]
    distractors: list[str]
    options: list[str]
    answer: str
    distractor_origins: list[str] = field(default_factory=list)
    checks: dict[str, bool] = field(default_factory=dict)


def to_dict(record: Any) -> dict[str, Any]:
    """Convert a record to a JSON-ready dict (nested records included)."""
    return dataclasses.asdict(record)


def from_dict(cls: type, data: dict[str, Any], *, where: str = "") -> Any:
    """Build a record of type ``cls`` from a dict, checking required fields.

    Args:
        cls: One of the record dataclasses.
        data: The dict (e.g. one parsed JSONL line).
        where: Location for error messages, e.g. ``"rollouts.jsonl line 12"``.

    Raises:
        RecordError: A required field is missing, a field is unknown, or ``data`` is not a dict.
    """
    if not isinstance(data, dict):
        raise RecordError(f"{where}: expected a JSON object for a {cls.__name__}, got {type(data).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = set(data) - set(fields)
    if unknown:
        raise RecordError(f"{where}: unknown field(s) {sorted(unknown)} for {cls.__name__}")
    missing = [
        name
        for name, f in fields.items()
        if name not in data
        and f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING  # type: ignore[misc]
    ]
    if missing:
        raise RecordError(f"{where}: missing field(s) {missing} for {cls.__name__}")
    kwargs = dict(data)
    if cls is TreeNode and isinstance(kwargs.get("problem"), dict):
        kwargs["problem"] = from_dict(Problem, kwargs["problem"], where=where + " .problem")
    if cls is TreeNode and "status" in kwargs:
        try:
            kwargs["status"] = NodeStatus(kwargs["status"])
        except ValueError:
            raise RecordError(f"{where}: unknown TreeNode status {kwargs['status']!r}; valid: {[s.value for s in NodeStatus]}") from None
    if cls is MCQ and isinstance(kwargs.get("span_offsets"), list):
        kwargs["span_offsets"] = tuple(kwargs["span_offsets"])
    return cls(**kwargs)
