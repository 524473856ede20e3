"""The written summary that opens ``report.html``: the run's headline numbers and what they mean.

Computed from the steps' ``summary.json`` files only (so a regenerated report is byte-identical):
what the zero-advantage trap holds for the target policy and how it differs between policies,
what moved with the budget L (the trap, truncation, problems changing band), what synthesis
kept and why it rejected the rest (and, with the embedded model as teacher and nothing qualified,
why and which config runs it with a real teacher), what Golden Goose's difficulty filter kept
against the 1/k chance level, what the export wrote, what trained on what (the zero-std share the
steps logged against the calibration's forecast), and the trained checkpoint against its start
on held-out problems, with intervals; for a thesis run, the pre-declared primary contrast at the
seed level (interval, sign-flip p, "not significant" where it is not), per task, the secondary
contrasts after Holm's correction, what the rewards measured and what each arm drew. Each
finding links to the figure (or table) that shows it; the report puts an ``id`` on every figure
(:func:`figure_id`).
"""

from __future__ import annotations

import html
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mbs.calibration import budget_sort_key
from mbs.progress import format_seconds
from mbs.runs.calibration import CalibrationResults
from mbs.runs.evaluation import EvalCell, EvaluationSummary
from mbs.runs.export import ExportSummary
from mbs.runs.goose import GooseSummary
from mbs.runs.pipeline import StepTimes
from mbs.runs.summary import RunKind
from mbs.runs.synthesis import SynthesisResults
from mbs.runs.thesis import Contrast, ThesisResults
from mbs.runs.training import TrainingOutcome
from mbs.thesis.table import drawn_text


@dataclass
class Finding:
    """One line of the summary.

    Attributes:
        step: The step it is about (``calibrate_live``, a pipeline sub-folder or the stage name).
        title: The headline (short, with the number).
        text: What it means, in a sentence or two.
        figure: Stem of the figure that shows it (``trap_bands``), or ``None`` (links to the step).
    """

    step: str
    title: str
    text: str
    figure: str | None = None


def figure_id(step: str, stem: str) -> str:
    """The HTML ``id`` of the figure ``stem`` of ``step`` in the report."""
    return f"fig-{step}-{stem}".replace(" ", "_")


def step_id(step: str) -> str:
    """The HTML ``id`` of a step's section in the report."""
    return f"step-{step}".replace(" ", "_")


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.0f}%"


def _n(count: Any, noun: str) -> str:
    """``"1 problem"``, ``"3 problems"``."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _reasons(counts: dict[str, int], top: int = 3) -> str:
    """``"parse error (2), not verified (1)"``: the most frequent reasons first."""
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    text = ", ".join(f"{k} ({v})" for k, v in ranked[:top])
    rest = sum(v for _, v in ranked[top:])
    return text + (f" and {rest} more" if rest else "")


def calibration_findings(step: str, s: Mapping[str, Any] | CalibrationResults) -> list[Finding]:
    """The trap, the spread between policies, the budget effect and the hard seeds of a calibration.

    Args:
        step: The step's name.
        s: Its summary (a loaded ``summary.json`` or :class:`~mbs.runs.calibration.CalibrationResults`).

    Raises:
        SummaryError: A field of the wrong type (names the field).
    """
    r = CalibrationResults.of(s, f"{step}/summary.json")
    out: list[Finding] = []
    target = r.target
    if target is None:
        return out
    bands = r.bands
    budgets = sorted(bands[target], key=budget_sort_key)
    top = budgets[-1]
    b, c = bands[target][top], r.cell(target, top)
    n = r.problems if c.n_problems is None else c.n_problems
    at = "" if top == "recorded" else f" at L = {top} tokens"
    seeds = f" Hard seeds for synthesis (failed_all for {target}): {r.hard_seeds}." if r.hard_seeds is not None else ""
    ci = r.band_intervals.get(target, {}).get(top, {}).get("trapped")
    ci_text = f" (95% interval {_pct(ci['ci'][0])} to {_pct(ci['ci'][1])}, n = {ci['n']})" if ci else ""
    what = (" These are recorded answers under the dataset's prompt settings, each no-hint setting counted as one "
            "rollout: a proxy for the trap, not N samples of one policy at a budget L." if top == "recorded" else "")
    out.append(Finding(
        step, f"{_pct(b['solved_all'] + b['failed_all'])} of {_n(n, 'problem')} are in the zero-advantage trap for {target}{at}",
        f"Trapped share{ci_text}: solved_all {_pct(b['solved_all'])}, failed_all {_pct(b['failed_all'])}.{what} "
        "All rollouts of such a problem get "
        f"the same reward, so every GRPO advantage is zero and it teaches nothing. Only {_pct(b['goldilocks'])} "
        f"({_n('?' if c.goldilocks is None else c.goldilocks, 'problem')}) are in the Goldilocks band, with mixed rollouts.{seeds}",
        "trap_bands",
    ))
    if len(bands) > 1:
        per = {p: v[top]["solved_all"] + v[top]["failed_all"] for p, v in bands.items() if top in v}
        lo, hi = min(per, key=per.__getitem__), max(per, key=per.__getitem__)
        pairs = r.between_policies.get(top, {})
        moved = max(pairs.items(), key=lambda kv: kv[1]) if pairs else None
        text = f"The trapped share runs from {_pct(per[lo])} ({lo}) to {_pct(per[hi])} ({hi}) over {len(per)} policies."
        if moved:
            text += (f" Difficulty is relative to the policy: {_pct(moved[1])} of the problems are in a different band "
                     f"for {moved[0].replace('|', ' and ')}.")
        out.append(Finding(step, f"The trap depends on the policy: {_pct(per[lo])} to {_pct(per[hi])} trapped", text,
                           "reclassification_heatmap"))
    numeric = [x for x in budgets if x != "recorded"]
    if len(numeric) > 1:
        lo_b, hi_b = numeric[0], numeric[-1]
        f_lo, f_hi = bands[target][lo_b]["failed_all"], bands[target][hi_b]["failed_all"]
        cut = {x: r.cell(target, x) for x in (lo_b, hi_b)}
        trunc = {x: (v.truncated / v.rollouts) if v.rollouts else None for x, v in cut.items()}
        moved_share = r.between_budgets.get(target, {}).get(f"{lo_b}|{hi_b}")
        change = (f"stayed at {_pct(f_lo)} from L = {lo_b} to L = {hi_b}" if f_hi == f_lo else
                  f"{'fell' if f_hi < f_lo else 'rose'} from {_pct(f_lo)} at L = {lo_b} to {_pct(f_hi)} at L = {hi_b}")
        text = (f"failed_all {change}; rollouts cut off by the budget (finish_reason length): "
                f"{_pct(trunc[lo_b])} at L = {lo_b}, {_pct(trunc[hi_b])} at L = {hi_b}.")
        if moved_share is not None:
            text += f" {_pct(moved_share)} of the problems changed band between the two budgets."
        text += " A problem is hard for a (policy, budget) pair, not by itself."
        out.append(Finding(step, f"With the budget L: failed_all {_pct(f_lo)} → {_pct(f_hi)} ({target})", text,
                           "failed_all_vs_budget"))
    sim = r.early_stop
    if sim and sim.rollouts and sim.saved:
        out.append(Finding(
            step, f"Early stopping would save {_pct(sim.saved / sim.rollouts)} of the rollouts",
            f"Drawing in batches of {sim.batch} and stopping once the {sim.decision} is settled: "
            f"{sim.saved} of {sim.rollouts} rollouts, with {sim.identical_decisions} of "
            f"{sim.groups} decisions identical (calibrate.early_stop.enabled=true).",
        ))
    return out


_METHOD_NAMES = {"mbs": "MagicBeanStalk", "direct": "Direct prompting (baseline)"}


def synthesis_findings(step: str, s: Mapping[str, Any] | SynthesisResults) -> list[Finding]:
    """Yield, qualified problems and the reasons for the rejections of an MBS or direct run.

    Args:
        step: The step's name.
        s: Its summary (a loaded ``summary.json`` or :class:`~mbs.runs.synthesis.SynthesisResults`).

    Raises:
        SummaryError: A field of the wrong type (names the field).
    """
    r = SynthesisResults.of(s, f"{step}/summary.json")
    name = _METHOD_NAMES.get(r.method or "", str(r.method))
    if r.cost_match:  # the direct baseline given MBS's teacher tokens per seed
        name = "Direct prompting, cost-matched to MBS"
    seeds = 0 if r.hard_seeds is None else r.hard_seeds
    q_seeds = 0 if r.seeds_qualified is None else r.seeds_qualified
    q = 0 if r.qualified_problems is None else r.qualified_problems
    per = r.teacher_tokens_per_qualified
    out = [Finding(
        step, f"{name}: {_n(q, 'qualified problem')} from {q_seeds} of {_n(seeds, 'hard seed')} (yield {_pct(r.yield_share)})",
        "Qualified: the target policy's pass rate is strictly between 0 and 1, with a complete correct response "
        "within L (out of the trap, usable for GRPO)."
        + (f" Teacher tokens per qualified problem: {per:.0f}." if per is not None else ""),
        "yield",
    )]
    if not q and _embedded_teacher(r):
        out[0].text += " " + _why_none(r.method)
    rej = r.rejections
    if rej:
        out.append(Finding(
            step, f"{name} rejected {_n(sum(rej.values()), 'candidate')}",
            f"Why: {_reasons(rej)}. Every rejection and its reason is in trees.*.jsonl.", "funnel",
        ))
    return out


#: Lower-case part of the embedded default model's label and file name (``conf/backend/llamacpp.yaml``).
EMBEDDED_MARK = "smollm2-135m"
#: The command that runs the main job's synthesis with a real teacher (``conf/teacher/hosted.yaml``).
REAL_TEACHER = ("mbs-pipeline teacher=hosted 'pipeline.synthesize.overrides.mbs=[synth.seeds_limit=2]' "
                "'pipeline.synthesize.overrides.direct=[synth.seeds_limit=2]'")


def _embedded_teacher(r: SynthesisResults) -> bool:
    """Whether a live teacher of the run is the embedded SmolLM2-135M (by its label or model file)."""
    names = [t for t in r.teachers if t != "reference"] + list(r.teacher_models)
    return any(EMBEDDED_MARK in n.lower() for n in names)


def _why_none(method: Any) -> str:
    """Why a 135M teacher qualifies nothing, and the config that runs the step with a real teacher."""
    if method != "mbs":  # the direct baselines: short, MagicBeanStalk's line has the command
        return ("Why 0: the teacher here is the embedded SmolLM2-135M, which cannot write a variant of a competition "
                "problem in the format the baseline parses, with an answer that verifies (see the rejections). "
                "A real teacher runs the same step: teacher=hosted (conf/teacher/hosted.yaml).")
    return ("Why 0: the teacher here is the embedded SmolLM2-135M, which cannot decompose a competition problem into "
            "subproblems in the format MagicBeanStalk parses, nor write a harder variant that verifies (see the "
            "rejections); that is this teacher's real yield. A real teacher runs the same step: teacher=hosted (a hosted "
            "reasoning API, GPT-5 by default, key in OPENAI_API_KEY; any OpenAI-compatible server with "
            f"teacher.pool.0.backend.base_url and teacher.pool.0.backend.model), e.g. {REAL_TEACHER}.")


def goose_findings(step: str, s: Mapping[str, Any] | GooseSummary) -> list[Finding]:
    """Items built, rejected by reason, and kept by the difficulty filter against chance.

    Args:
        step: The step's name.
        s: Its summary (a loaded ``summary.json`` or :class:`~mbs.runs.goose.GooseSummary`).

    Raises:
        SummaryError: A field of the wrong type (names the field).
    """
    g = GooseSummary.of(s, f"{step}/summary.json")
    k = g.options
    built = 0 if g.items_built is None else g.items_built
    out = [Finding(
        step, f"Golden Goose: {_n(built, f'{k}-option item')} from {_n(0 if g.passages is None else g.passages, 'passage')}",
        (f"Rejected {_n(0 if g.rejected_total is None else g.rejected_total, 'passage')}: {_reasons(g.rejected)}."
         if g.rejected else "No passage was rejected.")
        + " An item masks a span of key reasoning steps; its distractors break it subtly.",
        "goose_letters",
    )]
    st = g.student
    if g.effective_share is not None:
        out.append(Finding(
            step, f"The difficulty filter kept {_n(0 if g.kept is None else g.kept, 'item')} ({_pct(g.effective_share)})",
            f"Kept: items whose rollouts disagree (Goldilocks). {st.policy}'s accuracy is "
            f"{_pct(st.accuracy)} against {_pct(st.chance)} for guessing one of {k} letters; "
            f"failed_all {_pct(g.bands.get('failed_all'))}, solved_all {_pct(g.bands.get('solved_all'))}.",
            "goose_pass_rates",
        ))
    return out


def export_findings(step: str, s: Mapping[str, Any] | ExportSummary) -> list[Finding]:
    """Rows written and rows removed (duplicates, contamination) by an export.

    Args:
        step: The step's name.
        s: Its summary (a loaded ``summary.json`` or :class:`~mbs.runs.export.ExportSummary`).

    Raises:
        SummaryError: A field of the wrong type (names the field).
    """
    e = ExportSummary.of(s, f"{step}/summary.json")
    per = {src.name: src.exported for src in e.sources}
    removed = e.removed
    text = "Per source: " + ", ".join(f"{k} {v}" for k, v in per.items()) + "." if per else ""
    text += (f" Removed {sum(removed.values())}: {_reasons(removed)}." if removed
             else " Nothing was removed as a duplicate or as contaminated.")
    return [Finding(step, f"Export: {_n(e.train_rows, 'training row')} and {_n(e.val_rows, 'validation row')} for verl",
                    text.strip(), None)]


def _interval(ci: Any) -> str:
    """``" [12%, 40%]"`` for a two-number interval, else ``""``."""
    return f" [{_pct(ci[0])}, {_pct(ci[1])}]" if isinstance(ci, (list, tuple)) and len(ci) == 2 else ""


def train_findings(step: str, s: Mapping[str, Any] | TrainingOutcome) -> list[Finding]:
    """What trained on what (policy, rows, steps, group size, budget) and the zero-std share the
    steps logged against the calibration's forecast (``trap_forecast``).

    Args:
        step: The step's name.
        s: Its summary (a loaded ``summary.json`` or :class:`~mbs.runs.training.TrainingOutcome`).

    Raises:
        SummaryError: A field of the wrong type (names the field).
    """
    t = TrainingOutcome.of(s, f"{step}/summary.json")
    who = t.calibrated_policy or t.model or "the policy"
    engine = {"trl": "TRL", "verl": "verl"}.get(t.engine or "", str(t.engine))
    rows = t.forecast_rows or t.data_trained or t.calibrated_rows
    source = f" of {t.calibrated_source}" if t.calibrated_source else ""
    on = f"{_n(rows, 'row')}{source}" if rows else f"the export{source}"
    if t.dry_run:
        title = f"Train (dry run): {who} would train with {engine} on {on}"
    elif t.steps is None:
        title = f"Train: {who} submitted to {engine} on {on}"
    else:
        title = f"Train: {who} trained {_n(t.steps, 'GRPO step')} with {engine} on {on}"
    text = (f"Exactly the calibrated policy: group size N = {t.group_size}, completion length "
            f"L = {t.max_completion_length} tokens, temperature {t.temperature}.")
    fc, obs = t.forecast, t.observed
    level = fc.level if fc is not None and fc.level is not None else obs.level if obs is not None else None
    lvl = f"{100 * level:.0f}% " if level is not None else ""
    if obs is not None:
        inside = "within" if obs.mean_within_forecast else "outside"
        groups = (obs.n_steps or 0) * obs.prompts_per_value
        text += (f" Zero-std groups (every reward equal, so no advantage): {_pct(obs.observed_mean)} observed over "
                 f"{_n(obs.n_steps, 'step')} ({_n(groups, 'group')}) against {_pct(obs.forecast_expected_share)} "
                 f"forecast by the calibration ({lvl}predictive interval{_interval(obs.forecast_mean_interval)}: "
                 f"{inside} it).")
    elif fc is not None:
        text += (f" The calibration forecasts {_pct(fc.expected_zero_std_share)} zero-std groups "
                 f"({lvl}interval{_interval(fc.share_ci)}); no step was logged here to compare.")
    elif t.forecast_skipped:
        text += f" No zero-std forecast: {t.forecast_skipped}."
    d = t.draws
    if d.dynamic_sampling:
        text += (f" Dynamic sampling drew {_n(d.rollouts_drawn, 'rollout')} in {_n(d.rounds, 'round')} "
                 f"and kept {d.groups_kept} of {_n(d.groups_drawn, 'group')}.")
    return [Finding(step, title, text, "zero_std_forecast")]


def evaluate_findings(step: str, s: Mapping[str, Any] | EvaluationSummary) -> list[Finding]:
    """Each evaluated model's avg@k with its interval, per benchmark and budget; the first model
    (the pipeline's: the checkpoint training started from) is the one the others are set against.

    Args:
        step: The step's name.
        s: Its summary (a loaded ``summary.json`` or :class:`~mbs.runs.evaluation.EvaluationSummary`).

    Raises:
        SummaryError: A field of the wrong type (names the field).
    """
    ev = EvaluationSummary.of(s, f"{step}/summary.json")
    models, out = list(ev.models), []
    k = ev.k
    for bench, name in (ev.benchmarks or {b: b for b in ev.benchmark_keys}).items():
        cells = {m: ev.cells(m, bench) for m in models}
        budgets = sorted({b for c in cells.values() for b in c}, key=budget_sort_key)
        if not budgets:
            continue
        top = budgets[-1]

        def at(m: str, b: str, cells: dict[str, dict[str, EvalCell]] = cells) -> str:  # "12% [5%, 20%]": avg@k and its interval
            r = cells[m].get(b) or EvalCell()
            return f"{_pct(r.avg)}{_interval(r.avg_ci)}"

        problems = next((c[top].problems for c in cells.values() if top in c), None)
        where = f"{name} ({_n(problems, 'problem')})" if problems else name
        if len(models) > 1:
            rest = ", ".join(f"{m} {at(m, top)}" for m in models[1:])
            title = f"Evaluate: {rest} against {models[0]} {at(models[0], top)}, avg@{k} on {where} at L = {top}"
        else:
            title = f"Evaluate: {models[0]} {at(models[0], top)}, avg@{k} on {where} at L = {top}"
        parts = []
        for b in budgets[:-1]:
            parts.append(f"At L = {b}: " + ", ".join(f"{m} {at(m, b)}" for m in models) + ".")
        cut = []
        for m in models:
            r = cells[m].get(top) or EvalCell()
            if r.truncated and r.problems and r.samples:
                cut.append(f"{r.truncated} of {r.problems * r.samples} ({m})")
        if cut:
            parts.append(f"Samples cut off by the budget L = {top}: " + ", ".join(cut) + ".")
        cis = [(cells[m].get(top) or EvalCell()).avg_ci for m in models]
        if len(models) > 1 and all(c is not None and len(c) == 2 for c in cis):
            overlap = max(c[0] for c in cis if c) <= min(c[1] for c in cis if c)
            parts.append("The intervals overlap: no difference is shown at this size." if overlap
                         else "The intervals do not overlap.")
        interval = next((c[top].interval for c in cells.values() if top in c and c[top].interval), None)
        parts.append(f"Intervals: {interval}." if interval else "")
        out.append(Finding(step, title, " ".join(p for p in parts if p), "accuracy_vs_budget"))
    return out


def _points(t: Contrast) -> str:
    """``"+6.9 points [-5.6, +20.0]"``: a contrast's difference and its seeds x problems interval, in points."""
    return f"{100 * t.difference:+.1f} points [{100 * t.ci[0]:+.1f}, {100 * t.ci[1]:+.1f}]"


def thesis_findings(step: str, s: Mapping[str, Any] | ThesisResults, alpha: float = 0.05) -> list[Finding]:
    """The thesis's result as a reviewer reads it (issue 43): the primary contrast declared before
    the run (difference in points of held-out avg@k at L, its 95% interval over seeds x problems,
    the sign-flip p over seeds, "not significant" where p >= ``alpha``, the seeds that favour each
    arm and the seeds 80% power would need), the primary contrast per task (Holm across tasks),
    the secondary contrasts after Holm's correction, the rewarded samples by extraction route and
    the strict grade, and the training rollouts each arm drew.

    Args:
        step: The step's name (``thesis``).
        s: Its summary (a loaded ``summary.json`` or :class:`~mbs.runs.thesis.ThesisResults`).
        alpha: The level the p-values are read at.

    Returns:
        The findings; none where no contrast was computed.

    Raises:
        SummaryError: A field of the wrong type (names the field).
    """
    r = ThesisResults.of(s, f"{step}/summary.json")
    p = r.primary
    if p is None:
        return []
    at = f"held-out avg@{r.eval_k} at L = {r.budget}"
    verdict = "significant" if p.sign_flip_p < alpha else "not significant"
    a, b = (p.contrast or "A - B").split(" - ", 1)
    text = (f"{p.a_better_seeds} seeds favour {a}, {p.b_better_seeds} {b}; t interval over the seeds' differences "
            f"[{100 * p.t_ci_seeds[0]:+.1f}, {100 * p.t_ci_seeds[1]:+.1f}].")
    if p.seeds_needed_80:
        text += f" At the measured spread, about {p.seeds_needed_80} seeds would give it 80% power (a planning number, not evidence)."
    out = [Finding(step, f"Thesis, primary contrast (declared before the run): {p.contrast} = {_points(p)} of {at}, over "
                         f"{_n(len(p.seeds), 'seed')} x {_n(p.problems, 'problem')}, sign-flip p = {p.sign_flip_p:.3g}: {verdict} "
                         f"at {alpha:g}", text, "accuracy_by_task" if r.by_task else "accuracy_vs_step")]
    if r.by_task:
        per = [f"{task}: {_points(t)} over {_n(t.problems, 'problem')}, p = {t.sign_flip_p:.3g}, Holm p = "
               f"{t.p_holm:.3g}" if t.p_holm is not None else f"{task}: {_points(t)}" for task, t in r.by_task.items()]
        out.append(Finding(step, f"Per task, the primary contrast: {'; '.join(per)}",
                           "Each task's held-out problems alone, Holm-corrected across the tasks.", "accuracy_by_task"))
    if r.secondary:
        below = [f"{key} {_points(t)}, Holm p = {t.p_holm:.3g}" for key, t in r.secondary.items()
                 if t.p_holm is not None and t.p_holm < alpha]
        low_key, low = min(r.secondary.items(), key=lambda kv: kv[1].sign_flip_p)
        title = (f"Secondary contrasts, Holm-corrected: {len(below)} of {len(r.secondary)} below {alpha:g}"
                 + (f": {'; '.join(below)}" if below else ""))
        out.append(Finding(step, title, f"The smallest uncorrected p: {low_key} {_points(low)}, p = {low.sign_flip_p:.3g}.",
                           "accuracy_vs_step"))
    if r.construct:
        routes: dict[str, int] = {}
        for c in r.construct.values():
            for route, n in c.routes.items():
                routes[route] = routes.get(route, 0) + n
        rewarded = sum(c.rewarded for c in r.construct.values())
        strict = ", ".join(f"{arm} {_pct(c.strict.mean)}{_interval(c.strict.ci)} of {c.samples}" for arm, c in r.construct.items()
                           if c.strict is not None)
        out.append(Finding(step, f"What the rewards measured: of {_n(rewarded, 'rewarded held-out sample')} (every arm, final "
                                 f"step), " + ", ".join(f"{n} by {route}" for route, n in sorted(routes.items(), key=lambda kv: -kv[1])),
                           f"Under a strict re-grade (answer tag only), avg@{r.eval_k} [95% over seeds x problems] of the samples graded: "
                           f"{strict}." if strict else ""))
    drawn = {arm: max(cells.items(), key=lambda kv: int(kv[0]))[1] for arm, cells in r.curves.items() if cells}
    if any(c.rollouts_drawn is not None for c in drawn.values()):
        out.append(Finding(step, "Training rollouts drawn by the last step (mean [95% t over seeds], range): "
                           + ", ".join(f"{arm} {drawn_text(c)}" for arm, c in drawn.items() if c.rollouts_drawn is not None),
                           "The cost of each arm's steps: dynamic sampling draws groups until a step holds only groups "
                           "whose rewards vary.", "accuracy_vs_step"))
    return out


def findings(steps: Sequence[tuple[str, Mapping[str, Any]]], run_summary: Mapping[str, Any] | None = None) -> list[Finding]:
    """Every finding of a run, in step order.

    Args:
        steps: ``(step name, its summary.json)`` for each step (one for a single stage run).
        run_summary: The pipeline's own ``summary.json`` (its ``step_seconds``), if any.

    Returns:
        The findings; a stage without a story contributes none.

    Raises:
        SummaryError: A summary field of the wrong type (names the step's summary and the field).
    """
    by_stage: dict[str, Callable[[str, Any], list[Finding]]] = {
        "calibrate": calibration_findings, "export": export_findings, "train": train_findings,
        "evaluate": evaluate_findings, "thesis": thesis_findings}
    out: list[Finding] = []
    for step, s in sorted(steps, key=lambda st: _story_order(*st)):
        kind = RunKind.of(s, f"{step}/summary.json")
        fn: Callable[[str, Any], list[Finding]] | None
        if kind.stage == "synthesize":
            fn = goose_findings if kind.method == "goose" else synthesis_findings
        else:
            fn = by_stage.get(kind.stage)
        if fn:
            out.extend(fn(step, s))
    secs = StepTimes.of(run_summary or {}, "summary.json").seconds
    if secs:
        slow = max(secs, key=secs.__getitem__)
        total = sum(secs.values())
        out.append(Finding(
            slow, f"The steps took {format_seconds(total)}; the slowest was {slow} ({format_seconds(secs[slow])})",
            "Per step: " + ", ".join(f"{k} {format_seconds(v)}" for k, v in secs.items())
            + " (the figures step is in manifest.json).",
        ))
    return out


def _story_order(step: str, s: Mapping[str, Any]) -> tuple[int, str]:
    """The headline first: live calibrations (N samples of a policy at a budget L; a difficulty
    study before the others), then recorded ones (a proxy), MBS, direct, Goose, export, train,
    evaluate, the rest."""
    kind = RunKind.of(s, f"{step}/summary.json")
    if kind.stage == "calibrate":
        cal = CalibrationResults.of(s, f"{step}/summary.json")
        rank = (0 if cal.by_difficulty else 1) if cal.budgets else 2  # budgets: the live policies' L
    else:
        rank = {("synthesize", "mbs"): 3, ("synthesize", "direct"): 4, ("synthesize", "goose"): 5}.get(
            (kind.stage, kind.method or ""), {"export": 6, "train": 7, "evaluate": 8}.get(kind.stage, 9))
    return rank, step


def story_html(items: Sequence[Finding], figures: dict[str, set[str]]) -> str:
    """The summary section: one list item per finding, linked to its figure (or its step).

    Args:
        items: From :func:`findings`.
        figures: Per step, the figure stems the report shows (a finding whose figure was
            skipped links to its step's section instead).
    """
    if not items:
        return ""
    lines = ["<section id='summary'><h2>Summary</h2><ul class='story'>"]
    for f in items:
        if f.figure and f.figure in figures.get(f.step, set()):
            link = f" <a href='#{figure_id(f.step, f.figure)}'>[figure: {html.escape(f.figure)}]</a>"
        else:
            link = f" <a href='#{step_id(f.step)}'>[{html.escape(f.step)}]</a>"
        lines.append(f"<li><b>{html.escape(f.title)}</b>. {html.escape(f.text)}{link}</li>")
    lines.append("</ul></section>")
    return "\n".join(lines)
