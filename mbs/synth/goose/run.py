"""Golden Goose: verifiable multiple-choice tasks from unverifiable text.

Run: ``mbs-synthesize method=goose goose.source=champ goose.teacher_free=true data.limit=12 hydra.run.dir=DIR``
(teacher-free, from CHAMP's step-wise solutions, no LLM for construction), or
``mbs-synthesize method=goose goose.source=jsonl goose.path=corpus.jsonl hydra.run.dir=DIR`` (the
teacher in ``teacher.pool[goose.teacher.index]`` masks a span and writes the distractors).

Method (Lu et al., 2026, "Golden Goose", sections 2-3): a contiguous span of key reasoning steps
is masked; the span is the correct option, ``k - 1`` subtly wrong spans are the distractors
(default k = 9, the paper's choice); every item is validated (:mod:`mbs.synth.goose.build`);
``N_goose`` = 16 rollouts of the target student (budget ``goose.filter.budget``) grade each item
with the ``mcq`` verifier, and items every rollout solves or every rollout fails are dropped.

Files written into the run directory (``<shard>`` = ``00000-of-00001``):

* ``candidates.<shard>.jsonl``: each validated item before shuffling, appended as it is built;
* ``rejected.<shard>.jsonl``: ``{passage_id, stage, reason, detail, attempt}`` per dropped passage,
  appended as it is decided (reasons: :data:`mbs.synth.goose.build.REASONS`);
* ``rollouts.<shard>.jsonl``: the filter's graded rollouts, appended as they are graded;
* ``mcq.<shard>.jsonl``: one :class:`~mbs.records.MCQ` per built item (options shuffled, the
  answer letters balanced over positions);
* ``items.<shard>.jsonl``: GooseReason-shaped rows (``question`` = masked passage and lettered
  options, ``options``, ``answer`` letter) with provenance (source id, span offsets, option
  origins) and the filter result (pass rate, band, kept);
* ``calibrations.<shard>.jsonl``: the filter's :class:`~mbs.records.Calibration` per item;
* ``problems.<shard>.jsonl``: the kept items as :class:`~mbs.records.Problem` records
  (answer type ``mcq``, ground truth the letter, data source ``mbs/mcq/goose-<origin>``),
  which ``mbs-export`` reads.

Resuming: a killed run rerun with the same ``hydra.run.dir`` reads back the candidates,
rejections and rollouts it finished; the LLM cache serves every teacher and student sample
already drawn, so no LLM call is repeated and nothing is lost. The derived files (``mcq``,
``items``, ``calibrations``, ``problems``) are rewritten in full from them.
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

from mbs.calibration import calibrate_group
from mbs.calibration.estimate import pass_rate_of
from mbs.calibration.sampling import Group, Policy, RolloutWriter, draw
from mbs.io import RunDir
from mbs.llm import build_backend
from mbs.llm.base import ChatRequest, salted_seed
from mbs.llm.meter import BackendMeter
from mbs.prompts import user_messages
from mbs.records import BANDS, MCQ, Calibration, Problem, Rollout
from mbs.stats import share
from mbs.synth.goose.build import (
    LETTERS,
    Candidate,
    Rejected,
    assemble,
    locate_span,
    option_origins,
    parse_extract_reply,
    parse_mask_reply,
    render_question,
    teacher_answered,
    validate,
)
from mbs.synth.goose.distractors import teacher_free_candidate
from mbs.synth.goose.judge import judge_candidates
from mbs.synth.goose.settings import Bounds, GooseSettings
from mbs.synth.goose.shortcuts import Auditor, audit_corpus, audit_report, enforce_audit
from mbs.synth.goose.sources import MASK, Passage, has_reasoning, load_passages, segment
from mbs.synth.settings import SynthSettings
from mbs.verify.mcq import ANSWER_TYPE
from mbs.verify.pool import GradingPool
from mbs.verify.sources import data_source

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------------------
# Passages and candidates
# --------------------------------------------------------------------------------------


def check_passage(p: Passage, goose: GooseSettings) -> None:
    """Passage-level checks before any span is chosen.

    Raises:
        Rejected: ``passage_has_mask``, ``passage_too_short`` (shorter than
            ``goose.min_passage_chars``) or ``no_reasoning`` (``goose.require_reasoning``).
    """
    if MASK in p.text:
        raise Rejected("passage_has_mask", f"{p.id} contains {MASK}")
    if len(p.text) < goose.min_passage_chars:
        raise Rejected("passage_too_short", f"{len(p.text)} < {goose.min_passage_chars} characters")
    if goose.require_reasoning and not has_reasoning(p.text):
        raise Rejected("no_reasoning", f"{p.id} shows no reasoning markers")


def candidate_row(c: Candidate) -> dict[str, Any]:
    """A candidate as a JSON row of ``candidates.*.jsonl`` (keeps the passage it was cut from)."""
    p = c.passage
    return {
        "passage_id": p.id,
        "origin": p.origin,
        "parents": list(p.parents),
        "passage": p.text,
        "start": c.start,
        "end": c.end,
        "distractors": list(c.distractors),
        "origins": list(c.origins),
        "options_rejected_equivalent": c.equivalent,
    }


def candidate_from_row(row: dict[str, Any], where: str) -> Candidate:
    """Inverse of :func:`candidate_row`.

    Raises:
        ValueError: A field is missing (names the file and line in ``where``).
    """
    try:
        p = Passage(id=row["passage_id"], text=row["passage"], origin=row["origin"], parents=list(row["parents"]))
        return Candidate(
            p, int(row["start"]), int(row["end"]), list(row["distractors"]), list(row["origins"]), int(row.get("options_rejected_equivalent", 0))
        )
    except KeyError as err:
        raise ValueError(f"{where}: candidate row lacks field {err}") from None


class _Book:
    """Appends decided passages (candidates, rejections) and remembers them."""

    def __init__(self, out: RunDir):
        self.cand_shard = out.shard("candidates")
        self.rej_shard = out.shard("rejected")
        self.candidates: dict[str, Candidate] = {}
        for i, row in enumerate(self.cand_shard.read(), 1):
            c = candidate_from_row(row, f"{self.cand_shard.path} record {i}")
            self.candidates[c.passage.id] = c
        self.rejected: dict[str, dict[str, Any]] = {r["passage_id"]: r for r in self.rej_shard.read()}
        for pid in self.rejected:  # an item the audit rejected after it was built
            self.candidates.pop(pid, None)
        self.resumed = len(self.candidates) + len(self.rejected)
        self.attempt_rejections: Counter = Counter()
        self.audit_shard = out.shard("audit")
        self.audits: dict[str, list[dict[str, Any]]] = {}
        for row in self.audit_shard.read():
            self.audits.setdefault(row["passage_id"], []).append(row)

    def audited(self, pid: str, attempt: int, row: dict[str, Any]) -> None:
        """Append the audit of one build attempt of passage ``pid``."""
        full = {"passage_id": pid, "attempt": attempt, **row}
        self.audit_shard.append([full])
        self.audits.setdefault(pid, []).append(full)

    def decided(self, pid: str) -> bool:
        return pid in self.candidates or pid in self.rejected

    def accept(self, c: Candidate) -> None:
        self.cand_shard.append([candidate_row(c)])
        self.candidates[c.passage.id] = c

    def reject(self, pid: str, stage: str, err: Rejected, attempt: int = 0) -> None:
        self.candidates.pop(pid, None)
        row = {"passage_id": pid, "stage": stage, "reason": err.reason, "detail": err.detail, "attempt": attempt,
               "options_rejected_equivalent": err.equivalent}
        self.rej_shard.append([row])
        self.rejected[pid] = row

    def close(self) -> None:
        self.cand_shard.close()
        self.rej_shard.close()
        self.audit_shard.close()


def build_teacher_free(todo: Sequence[Passage], goose: GooseSettings, seed: int, book: _Book, auditor: Auditor) -> None:
    """Teacher-free construction of every passage in ``todo`` (no LLM), audited and written as it goes."""
    for p in todo:
        try:
            check_passage(p, goose)
            cand = teacher_free_candidate(p, goose.steps, goose.bounds, seed)
            book.audited(p.id, 0, auditor.candidate(cand))
            book.accept(cand)
        except Rejected as err:
            book.reject(p.id, "build", err)


def build_with_teacher(
    todo: Sequence[Passage], settings: SynthSettings, book: _Book, backends: dict[str, Any], auditor: Auditor
) -> None:
    """LLM-teacher construction: optional passage extraction, then span masking and distractors.

    All passages' requests go to the (cached) teacher as one batch per round, so served
    backends work on many at once. With ``goose.teacher.judge`` the teacher then checks each
    validated item's distractors (:func:`mbs.synth.goose.judge.judge_candidates`, one batch per
    round). A reply that fails parsing, validation or the judge is retried with the next sample
    index up to ``goose.teacher.attempts`` times; the passage is then rejected with the last reason. Each built item is audited (:func:`enforce_audit` applies the policy
    afterwards: teacher items are rejected, not rebuilt). Decisions are appended as they are made.

    Raises:
        ValueError: The selected teacher is not a live model.
        mbs.llm.BackendError: The teacher backend failed after its retries (decisions made so
            far are kept; the LLM cache keeps every finished completion).
    """
    goose = settings.goose
    bounds = goose.bounds
    t = goose.teacher.entry(settings.teacher_pool)
    backend = build_backend(t.backend, settings.cache_dir)
    meter = BackendMeter([(f"teacher:{t.name}", t.backend)], settings.cache_dir)
    attempts = max(1, goose.teacher.attempts)
    seed = settings.seed

    def request(messages: list[dict[str, str]], attempt: int) -> ChatRequest:
        return ChatRequest(
            messages=messages, n=1, max_tokens=int(t.max_tokens), temperature=float(t.temperature),
            seed=salted_seed(seed, json.dumps(messages, sort_keys=True)), first_index=attempt,
        )

    ready: list[Passage] = []
    if goose.extract:
        reqs = [request(user_messages(goose.teacher.extract_template, text=p.text), 0) for p in todo]
        extracted: dict[int, Passage] = {}
        for ri, comps in backend.generate_iter(reqs):
            p = todo[ri]
            try:
                teacher_answered(comps[0])
                clean = parse_extract_reply(comps[0].text)
                if clean is None:
                    raise Rejected("no_passage", f"teacher found no passage in {p.id}")
                q = Passage(id=p.id, text=clean, origin=p.origin, steps=segment(clean, goose.source.segment), parents=p.parents, where=p.where)
                check_passage(q, goose)
                extracted[ri] = q
            except Rejected as err:
                book.reject(p.id, "extract", err)
        ready = [extracted[i] for i in sorted(extracted)]
    else:
        for p in todo:
            try:
                check_passage(p, goose)
                ready.append(p)
            except Rejected as err:
                book.reject(p.id, "passage", err)

    k = bounds.options
    pending = ready
    same: Counter = Counter()  # distractors equivalent to the answer, per passage over its attempts

    def accept(cand: Candidate) -> None:
        cand.equivalent = same[cand.passage.id]
        book.audited(cand.passage.id, 0, auditor.candidate(cand))
        book.accept(cand)

    def failed(p: Passage, err: Rejected, attempt: int) -> bool:
        """Count the rejection; ``True`` when the passage gets another attempt."""
        same[p.id] += err.equivalent
        err.equivalent = same[p.id]
        book.attempt_rejections[err.reason] += 1
        if attempt + 1 < attempts:
            return True
        book.reject(p.id, "mask", err, attempt)
        return False

    for attempt in range(attempts):
        reqs = [
            request(user_messages(goose.teacher.mask_template, n_distractors=str(k - 1), n_options=str(k), passage=p.text), attempt)
            for p in pending
        ]
        retry: dict[int, Passage] = {}
        built: dict[int, Candidate] = {}  # validated, waiting for the judge pass
        for ri, comps in backend.generate_iter(reqs):
            p = pending[ri]
            try:
                teacher_answered(comps[0])
                span, distractors = parse_mask_reply(comps[0].text)
                start, end = locate_span(p, span)
                cand = Candidate(p, start, end, [d.strip() for d in distractors], [f"teacher:{t.name}"] * len(distractors))
                validate(cand, bounds)
                if goose.teacher.judge:
                    built[ri] = cand
                else:
                    accept(cand)  # decided as it streams in: a killed run keeps it
            except Rejected as err:
                if failed(p, err, attempt):
                    retry[ri] = p
        order = sorted(built)
        verdicts = judge_candidates([built[i] for i in order], backend, request, goose.teacher.judge_template, attempt) if built else []
        for ri, verdict in zip(order, verdicts):
            if verdict is None:
                accept(built[ri])
            elif failed(built[ri].passage, verdict, attempt):
                retry[ri] = built[ri].passage
        pending = [retry[i] for i in sorted(retry)]
    backends.update(meter.report())


# --------------------------------------------------------------------------------------
# Items, filter, outputs
# --------------------------------------------------------------------------------------


def items_in_order(passages: Sequence[Passage], book: _Book, seed: int, bounds: Bounds) -> list[MCQ]:
    """Assemble the built candidates into items in passage order (answer positions balanced).

    Candidates read back from disk are validated again (cheap); one that fails now (the run
    directory was resumed with other ``goose`` bounds) is rejected with its reason.
    """
    items: list[MCQ] = []
    for p in passages:
        c = book.candidates.get(p.id)
        if c is None:
            continue
        try:
            checks = validate(c, bounds)
        except Rejected as err:
            log.warning("goose: candidate %s fails validation on resume (%s); rejected", p.id, err)
            book.rejected[p.id] = {"passage_id": p.id, "stage": "resume", "reason": err.reason, "detail": err.detail, "attempt": 0}
            continue
        items.append(assemble(c, checks, len(items), seed))
    return items


def problem_of(item: MCQ, origin: str, parents: Sequence[str]) -> Problem:
    """The :class:`Problem` of an item: the question as prompt, its letter as ground truth."""
    return Problem(
        id=item.id,
        data_source=data_source(ANSWER_TYPE, f"goose-{origin}"),
        prompt=render_question(item.masked_passage, item.options),
        ground_truth=item.answer,
        answer_type=ANSWER_TYPE,
        reference_solution=item.span,
        metadata={
            "method": "goose",
            "source_id": item.source_id,
            "span_offsets": list(item.span_offsets),
            "n_options": len(item.options),
            "options": list(item.options),
            "option_origins": option_origins(item),
        },
        parents=list(parents),
    )


def _target_policy(settings: SynthSettings) -> Policy:
    return settings.students.live_target("the Goose filter")


def difficulty_filter(
    problems: Sequence[Problem], settings: SynthSettings, out: RunDir, backends: dict[str, Any], stats: Counter
) -> tuple[dict[str, Calibration], list[Rollout], Policy]:
    """``goose.filter.n`` graded rollouts of the target student per item (Golden Goose, section 3).

    Rollouts are drawn through :func:`mbs.calibration.sampling.draw` (LLM cache, grading pool, sequential
    early stopping when ``synth.early_stop``: decisions identical to drawing all N) and appended
    to ``rollouts.*.jsonl`` as they are graded; those already there are not drawn again.

    Returns:
        ``({item id: Calibration}, rollouts, policy)``.

    Raises:
        ValueError: The target student is not a live policy.
        mbs.llm.BackendError: The student backend failed after its retries (finished rollouts are kept).
    """
    policy = _target_policy(settings)
    budget, n = settings.goose.filter.response_budget(policy), settings.goose.filter.n
    templates = {"mcq": settings.templates["mcq"]}  # the template export renders the items with
    groups = [Group.of(p, budget, templates, settings.verifier) for p in problems]
    ids = {p.id for p in problems}
    shard = out.shard("rollouts", Rollout)
    done: dict[tuple, Rollout] = {}
    for r in shard.read():
        if r.problem_id in ids and r.policy == policy.name and r.budget == budget:
            done.setdefault(r.key, r)
    stats["rollouts_resumed"] += len(done)
    sampling = settings.sampling
    meter = BackendMeter([(policy.name, policy.backend)], sampling.cache_dir)
    es = {"enabled": sampling.early_stop, "batch": sampling.early_stop_batch, "decision": "band", "alpha": 0.5}
    with GradingPool.from_config(settings.verifier) as pool, shard:
        writer = RolloutWriter(pool, shard, done)
        try:
            drawn = draw(
                policy, groups, n, writer, sampling.cache_dir, temperature=sampling.temperature,
                top_p=sampling.top_p, seed=sampling.seed, early_stop=es, stats=stats, desc="goose filter",
            )
        finally:
            writer.flush(wait=True)
    backends.update(meter.report())
    batch = sampling.early_stop_batch if sampling.early_stop else None  # pass_rate_est: unbiased under that rule
    cals = {gid: calibrate_group(rs, n, "band", batch=batch) for (gid, _), rs in drawn.items() if rs}
    rollouts = [r for rs in drawn.values() for r in rs]
    return cals, rollouts, policy


def item_row(item: MCQ, origin: str, cal: Calibration | None, kept: bool | None) -> dict[str, Any]:
    """A GooseReason-shaped row (``question``, ``options``, ``answer``) with provenance and filter result."""
    return {
        "id": item.id,
        "question": render_question(item.masked_passage, item.options),
        "options": list(item.options),
        "answer": item.answer,
        "data_source": data_source(ANSWER_TYPE, f"goose-{origin}"),
        "source_id": item.source_id,
        "span": item.span,
        "span_offsets": list(item.span_offsets),
        "option_origins": option_origins(item),
        "n_options": len(item.options),
        "pass_rate": None if cal is None else cal.pass_rate,
        "pass_rate_est": None if cal is None else pass_rate_of(cal),
        "successes": None if cal is None else cal.successes,
        "n": None if cal is None else cal.n,
        "band": None if cal is None else cal.band,
        "kept": kept,
    }


def letter_report(letters: Sequence[str], k: int) -> dict[str, Any]:
    """Counts of answer letters over the ``k`` positions and a chi-square statistic against uniform."""
    counts = Counter(letters)
    n = len(letters)
    expected = n / k if k else 0.0
    chi2 = sum((counts.get(L, 0) - expected) ** 2 / expected for L in LETTERS[:k]) if n else 0.0
    return {
        "counts": {L: counts.get(L, 0) for L in LETTERS[:k]},
        "n": n,
        "expected_per_letter": expected,
        "max_abs_deviation": max((abs(counts.get(L, 0) - expected) for L in LETTERS[:k]), default=0.0),
        "chi2": chi2,
    }


def chance_goldilocks_share(k: int, n: int) -> float:
    """Share of items a policy guessing uniformly among ``k`` options lands in the Goldilocks band
    with ``n`` rollouts: ``1 - (1 - 1/k)^n - (1/k)^n`` (e.g. 0.85 for k = 9, n = 16)."""
    c = 1.0 / k
    return 1.0 - (1.0 - c) ** n - c**n


def run(settings: SynthSettings, out: RunDir) -> dict[str, Any]:
    """Build, validate and difficulty-filter Golden Goose items into ``out``.

    Args:
        settings: The run's settings (``method=goose``; ``settings.goose`` its own).
        out: The run directory.

    Returns:
        The summary: ``passages`` (in), ``items_built``, ``rejected`` (counts by reason),
        ``options_rejected_equivalent`` (candidate options rejected as equivalent to the answer by
        evaluation, :mod:`mbs.synth.goose.equivalence`: grid cells and perturbations of the builds
        kept or rejected, teacher distractors of rejected replies),
        ``effective_share`` (Goldilocks items / filtered items), ``letters`` (answer-letter
        distribution of built and kept items), ``options`` (k), ``student`` (accuracy against the
        1/k chance level, the Goldilocks share a guessing policy would reach; both read each item's
        :func:`~mbs.calibration.estimate.pass_rate_of`), ``bands``,
        ``distractor_origins``, ``counts`` (for the manifest) and ``backends`` (LLM usage).

    Raises:
        KeyError: Unknown ``goose.source``.
        ValueError: The teacher or the student the settings select cannot serve (index, source, budget).
        mbs.data.DataError: Bad corpus input with ``goose.on_error=raise``.
        mbs.llm.BackendError: A backend failed after its retries (finished work is kept).
    """
    goose = settings.goose
    auditor = Auditor(goose.audit, settings.cache_dir)
    if goose.audit.only:
        return audit_corpus(goose, out, auditor)
    bounds = goose.bounds
    seed = settings.seed
    t0 = time.perf_counter()
    passages, src_report = load_passages(goose.source, goose.data_limit, settings.inputs.shard_index, settings.inputs.shard_count)
    out.timings["load"] = time.perf_counter() - t0
    log.info("goose: %d passages from %s (%s)", len(passages), goose.source.name, "teacher-free" if goose.teacher_free else "teacher")

    backends: dict[str, Any] = {}
    book = _Book(out)
    todo = [p for p in passages if not book.decided(p.id)]
    t1 = time.perf_counter()
    try:
        if goose.teacher_free:
            build_teacher_free(todo, goose, seed, book, auditor)
        else:
            build_with_teacher(todo, settings, book, backends, auditor)
        flagged = enforce_audit(passages, goose, seed, book, auditor)
    finally:
        book.close()
    out.timings["build"] = time.perf_counter() - t1

    items = items_in_order(passages, book, seed, bounds)
    by_passage = {p.id: p for p in passages}
    origin_of = {it.id: by_passage[it.source_id].origin for it in items}
    problems = [problem_of(it, origin_of[it.id], by_passage[it.source_id].parents) for it in items]
    out.shard("mcq", MCQ).rewrite(items)

    stats: Counter = Counter()
    cals: dict[str, Calibration] = {}
    rollouts: list[Rollout] = []
    policy_name = None
    t2 = time.perf_counter()
    filtered = goose.filter.enabled
    if filtered and problems:
        cals, rollouts, policy = difficulty_filter(problems, settings, out, backends, stats)
        policy_name = policy.name
    out.timings["filter"] = time.perf_counter() - t2
    kept_ids = {i for i, c in cals.items() if c.band == "goldilocks"} if filtered else {it.id for it in items}
    out.shard("calibrations", Calibration).rewrite([cals[it.id] for it in items if it.id in cals])
    audits = {it.id: auditor.row(it.options, LETTERS.index(it.answer), it.masked_passage) for it in items}
    rows = [item_row(it, origin_of[it.id], cals.get(it.id), it.id in kept_ids if filtered else None) for it in items]
    for r in rows:
        r["audit_answered"] = audits[r["id"]]["answered"]
    out.shard("items").rewrite(rows)
    kept_problems = [p for p in problems if p.id in kept_ids]
    for p in kept_problems:
        c = cals.get(p.id)
        if c is not None:
            p.metadata.update({"pass_rate": pass_rate_of(c), "band": c.band, "policy": c.policy, "budget": c.budget})
    out.shard("problems", Problem).rewrite(kept_problems)

    passage_ids = set(by_passage)
    rejected = Counter(r["reason"] for pid, r in book.rejected.items() if pid in passage_ids)
    if src_report.skipped:
        rejected["bad_record"] += src_report.skipped
    k = bounds.options
    n_filtered = len(cals)
    band_counts = {b: sum(1 for c in cals.values() if c.band == b) for b in BANDS}
    # s/k is biased under early stopping: each item's rate is its estimate (mbs.calibration.estimate)
    rates = [est for c in cals.values() if (est := pass_rate_of(c)) is not None]
    accuracy = sum(rates) / len(rates) if rates else None
    origins = Counter(o.split(":")[0] if not o.startswith("perturb:") else o for it in items for o in it.distractor_origins)
    first_builds = [min(book.audits[p.id], key=lambda r: r["attempt"]) for p in passages if book.audits.get(p.id)]
    audit = audit_report(
        k, auditor.policy, first_builds, list(audits.values()), [audits[it.id] for it in items if it.id in kept_ids],
        rebuilt=sum(1 for it in items if len(book.audits.get(it.source_id, ())) > 1), rejected=rejected.get("shortcut", 0),
    )
    audit.update(flagged=flagged, alpha=auditor.alpha)
    summary: dict[str, Any] = {
        "source": goose.source.name,
        "teacher_free": goose.teacher_free,
        "extract": goose.extract,
        "options": k,
        "passages": len(passages),
        "items_built": len(items),
        "rejected": dict(sorted(rejected.items())),
        "rejected_total": sum(rejected.values()),
        "attempt_rejections": dict(sorted(book.attempt_rejections.items())),
        # candidate options (grid cells, perturbations, teacher distractors) rejected as equivalent to the answer
        "options_rejected_equivalent": sum(c.equivalent for pid, c in book.candidates.items() if pid in passage_ids)
        + sum(r.get("options_rejected_equivalent", 0) for pid, r in book.rejected.items() if pid in passage_ids),
        "resumed_decisions": book.resumed,
        "effective_share": (len(kept_ids) / n_filtered) if filtered and n_filtered else None,
        "effective_share_ci": share(len(kept_ids), n_filtered) if filtered and n_filtered else None,
        "kept": len(kept_problems),
        "bands": {b: (band_counts[b] / n_filtered if n_filtered else 0.0) for b in BANDS},
        "band_counts": band_counts,
        "band_intervals": {b: share(band_counts[b], n_filtered) for b in BANDS},
        "usable": sum(1 for c in cals.values() if c.usable),
        "letters": {
            "built": letter_report([it.answer for it in items], k),
            "kept": letter_report([it.answer for it in items if it.id in kept_ids], k),
        },
        "distractor_origins": dict(sorted(origins.items())),
        "audit": audit,
        "filter": {
            "enabled": filtered,
            "policy": policy_name,
            "budget": goose.filter.response_budget(_target_policy(settings) if filtered else None),
            "n": goose.filter.n,
            "early_stop": settings.sampling.early_stop,
            "rollouts": len(rollouts),
            "rollouts_resumed": stats["rollouts_resumed"],
            "rollouts_saved_by_early_stopping": stats["rollouts_saved"],
            "truncated": sum(1 for r in rollouts if r.finish_reason == "length"),
            "no_letter": sum(1 for r in rollouts if r.extracted is None),
            "completion_tokens": sum(r.completion_tokens for r in rollouts),
        },
        "student": {
            "policy": policy_name,
            "accuracy": accuracy,
            "accuracy_items": len(rates),
            "accuracy_all_drawn": (sum(1 for r in rollouts if r.reward == 1.0) / len(rollouts)) if rollouts else None,
            "chance": 1.0 / k,
            "accuracy_over_chance": (accuracy * k) if accuracy is not None else None,
            "items_above_chance": (sum(1 for r in rates if r > 1.0 / k) / len(rates)) if rates else None,
            "chance_goldilocks_share": chance_goldilocks_share(k, goose.filter.n),
        },
        "sources": src_report.as_dict(),
        "counts": {
            "passages": len(passages),
            "items_built": len(items),
            "rejected": sum(rejected.values()),
            "kept": len(kept_problems),
            "rollouts": len(rollouts),
        },
        "backends": backends,
    }
    log.info(
        "goose: %d passages -> %d items (%d rejected), %d kept, effective share %s",
        len(passages), len(items), sum(rejected.values()), len(kept_problems), summary["effective_share"],
    )
    return summary
