"""The written summary that opens ``report.html``: the run's headline numbers and what they mean.

Computed from the steps' ``summary.json`` files only (so a regenerated report is byte-identical):
what the zero-advantage trap holds for the target policy and how it differs between policies,
what moved with the budget L (the trap, truncation, problems changing band), what synthesis
kept and why it rejected the rest (and, with the embedded model as teacher and nothing qualified,
why and which config runs it with a real teacher), what Golden Goose's difficulty filter kept
against the 1/k chance level, what the export wrote, what trained on what (the zero-std share the
steps logged against the calibration's forecast), and the trained checkpoint against its start
on held-out problems, with intervals. Each finding links to the figure (or table) that shows it;
the report puts an ``id`` on every figure (:func:`figure_id`).
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mbs.calibration import budget_sort_key
from mbs.progress import format_seconds


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


def calibration_findings(step: str, s: dict[str, Any]) -> list[Finding]:
    """The trap, the spread between policies, the budget effect and the hard seeds of a calibration."""
    out: list[Finding] = []
    bands, counts = s.get("bands", {}), s.get("counts", {})
    target = s.get("target_policy")
    if not bands:
        return out
    target = target if target in bands else next(iter(bands))
    budgets = sorted(bands[target], key=budget_sort_key)
    top = budgets[-1]
    b, c = bands[target][top], counts.get(target, {}).get(top, {})
    n = c.get("n_problems", s.get("problems"))
    at = "" if top == "recorded" else f" at L = {top} tokens"
    seeds = f" Hard seeds for synthesis (failed_all for {target}): {s['hard_seeds']}." if "hard_seeds" in s else ""
    ci = s.get("intervals", {}).get("bands", {}).get(target, {}).get(top, {}).get("trapped")
    ci_text = f" (95% interval {_pct(ci['ci'][0])} to {_pct(ci['ci'][1])}, n = {ci['n']})" if ci else ""
    what = (" These are recorded answers under the dataset's prompt settings, each no-hint setting counted as one "
            "rollout: a proxy for the trap, not N samples of one policy at a budget L." if top == "recorded" else "")
    out.append(Finding(
        step, f"{_pct(b['solved_all'] + b['failed_all'])} of {_n(n, 'problem')} are in the zero-advantage trap for {target}{at}",
        f"Trapped share{ci_text}: solved_all {_pct(b['solved_all'])}, failed_all {_pct(b['failed_all'])}.{what} "
        "All rollouts of such a problem get "
        f"the same reward, so every GRPO advantage is zero and it teaches nothing. Only {_pct(b['goldilocks'])} "
        f"({_n(c.get('goldilocks', '?'), 'problem')}) are in the Goldilocks band, with mixed rollouts.{seeds}",
        "trap_bands",
    ))
    if len(bands) > 1:
        per = {p: v[top]["solved_all"] + v[top]["failed_all"] for p, v in bands.items() if top in v}
        lo, hi = min(per, key=per.get), max(per, key=per.get)
        pairs = s.get("reclassification", {}).get("policies", {}).get(top, {})
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
        cut = {x: counts.get(target, {}).get(x, {}) for x in (lo_b, hi_b)}
        trunc = {x: (v.get("truncated", 0) / v["rollouts"]) if v.get("rollouts") else None for x, v in cut.items()}
        moved = s.get("reclassification", {}).get("budgets", {}).get(target, {}).get(f"{lo_b}|{hi_b}")
        change = (f"stayed at {_pct(f_lo)} from L = {lo_b} to L = {hi_b}" if f_hi == f_lo else
                  f"{'fell' if f_hi < f_lo else 'rose'} from {_pct(f_lo)} at L = {lo_b} to {_pct(f_hi)} at L = {hi_b}")
        text = (f"failed_all {change}; rollouts cut off by the budget (finish_reason length): "
                f"{_pct(trunc[lo_b])} at L = {lo_b}, {_pct(trunc[hi_b])} at L = {hi_b}.")
        if moved is not None:
            text += f" {_pct(moved)} of the problems changed band between the two budgets."
        text += " A problem is hard for a (policy, budget) pair, not by itself."
        out.append(Finding(step, f"With the budget L: failed_all {_pct(f_lo)} → {_pct(f_hi)} ({target})", text,
                           "failed_all_vs_budget"))
    sim = s.get("early_stop_simulation")
    if sim and sim.get("rollouts") and sim.get("saved"):
        out.append(Finding(
            step, f"Early stopping would save {_pct(sim['saved'] / sim['rollouts'])} of the rollouts",
            f"Drawing in batches of {sim.get('batch')} and stopping once the {sim.get('decision')} is settled: "
            f"{sim['saved']} of {sim['rollouts']} rollouts, with {sim.get('identical_decisions')} of "
            f"{sim.get('groups')} decisions identical (calibrate.early_stop.enabled=true).",
        ))
    return out


def synthesis_findings(step: str, s: dict[str, Any]) -> list[Finding]:
    """Yield, qualified problems and the reasons for the rejections of an MBS or direct run."""
    name = {"mbs": "MagicBeanStalk", "direct": "Direct prompting (baseline)"}.get(s.get("method"), str(s.get("method")))
    if s.get("cost_match"):  # the direct baseline given MBS's teacher tokens per seed
        name = "Direct prompting, cost-matched to MBS"
    seeds, q_seeds, q = s.get("hard_seeds", 0), s.get("seeds_qualified", 0), s.get("qualified_problems", 0)
    per = s.get("teacher_tokens_per_qualified")
    out = [Finding(
        step, f"{name}: {_n(q, 'qualified problem')} from {q_seeds} of {_n(seeds, 'hard seed')} (yield {_pct(s.get('yield'))})",
        "Qualified: the target policy's pass rate is strictly between 0 and 1, with a complete correct response "
        "within L (out of the trap, usable for GRPO)."
        + (f" Teacher tokens per qualified problem: {per:.0f}." if isinstance(per, (int, float)) else ""),
        "yield",
    )]
    if not q and _embedded_teacher(s):
        out[0].text += " " + _why_none(s.get("method"))
    rej = s.get("rejections") or {}
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


def _embedded_teacher(s: dict[str, Any]) -> bool:
    """Whether a live teacher of the run is the embedded SmolLM2-135M (by its label or model file)."""
    names = [str(t) for t in s.get("teachers") or [] if t != "reference"]
    names += [str(b.get("model_id", "")) for k, b in (s.get("backends") or {}).items()
              if str(k).startswith("teacher:") and isinstance(b, dict)]
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


def goose_findings(step: str, s: dict[str, Any]) -> list[Finding]:
    """Items built, rejected by reason, and kept by the difficulty filter against chance."""
    k = s.get("options")
    out = [Finding(
        step, f"Golden Goose: {_n(s.get('items_built', 0), f'{k}-option item')} from {_n(s.get('passages', 0), 'passage')}",
        (f"Rejected {_n(s.get('rejected_total', 0), 'passage')}: {_reasons(s['rejected'])}." if s.get("rejected")
         else "No passage was rejected.") + " An item masks a span of key reasoning steps; its distractors break it subtly.",
        "goose_letters",
    )]
    st = s.get("student") or {}
    if s.get("effective_share") is not None:
        out.append(Finding(
            step, f"The difficulty filter kept {_n(s.get('kept', 0), 'item')} ({_pct(s['effective_share'])})",
            f"Kept: items whose rollouts disagree (Goldilocks). {st.get('policy')}'s accuracy is "
            f"{_pct(st.get('accuracy'))} against {_pct(st.get('chance'))} for guessing one of {k} letters; "
            f"failed_all {_pct(s.get('bands', {}).get('failed_all'))}, solved_all {_pct(s.get('bands', {}).get('solved_all'))}.",
            "goose_pass_rates",
        ))
    return out


def export_findings(step: str, s: dict[str, Any]) -> list[Finding]:
    """Rows written and rows removed (duplicates, contamination) by an export."""
    rows = s.get("rows", {})
    per = {name: v.get("exported", 0) for name, v in s.get("sources", {}).items()}
    removed = s.get("removed") or {}
    text = "Per source: " + ", ".join(f"{k} {v}" for k, v in per.items()) + "." if per else ""
    text += (f" Removed {sum(removed.values())}: {_reasons(removed)}." if removed
             else " Nothing was removed as a duplicate or as contaminated.")
    return [Finding(step, f"Export: {_n(rows.get('train', 0), 'training row')} and {_n(rows.get('val', 0), 'validation row')} for verl",
                    text.strip(), None)]


def _interval(ci: Any) -> str:
    """``" [12%, 40%]"`` for a two-number interval, else ``""``."""
    return f" [{_pct(ci[0])}, {_pct(ci[1])}]" if isinstance(ci, (list, tuple)) and len(ci) == 2 else ""


def train_findings(step: str, s: dict[str, Any]) -> list[Finding]:
    """What trained on what (policy, rows, steps, group size, budget) and the zero-std share the
    steps logged against the calibration's forecast (``trap_forecast``)."""
    policy = s.get("policy") or {}
    cal = policy.get("calibrated") or {}
    who = cal.get("policy") or policy.get("model") or "the policy"
    engine = {"trl": "TRL", "verl": "verl"}.get(s.get("engine"), str(s.get("engine")))
    tf = s.get("trap_forecast") or {}
    rows = (tf.get("calibrations") or {}).get("rows") or (s.get("data") or {}).get("trained") or cal.get("rows")
    source = f" of {cal['source']}" if cal.get("source") else ""
    on = f"{_n(rows, 'row')}{source}" if rows else f"the export{source}"
    steps = (s.get("result") or {}).get("steps")
    if s.get("dry_run"):
        title = f"Train (dry run): {who} would train with {engine} on {on}"
    elif steps is None:
        title = f"Train: {who} submitted to {engine} on {on}"
    else:
        title = f"Train: {who} trained {_n(steps, 'GRPO step')} with {engine} on {on}"
    text = (f"Exactly the calibrated policy: group size N = {policy.get('group_size')}, completion length "
            f"L = {policy.get('max_completion_length')} tokens, temperature {policy.get('temperature')}.")
    fc, obs = tf.get("forecast") or {}, tf.get("observed") or {}
    level = fc.get("level", obs.get("level"))
    lvl = f"{100 * level:.0f}% " if isinstance(level, (int, float)) else ""
    if obs:
        inside = "within" if obs.get("mean_within_forecast") else "outside"
        groups = obs.get("n_steps", 0) * obs.get("prompts_per_value", 1)
        text += (f" Zero-std groups (every reward equal, so no advantage): {_pct(obs.get('observed_mean'))} observed over "
                 f"{_n(obs.get('n_steps'), 'step')} ({_n(groups, 'group')}) against {_pct(obs.get('forecast_expected_share'))} "
                 f"forecast by the calibration ({lvl}predictive interval{_interval(obs.get('forecast_mean_interval'))}: "
                 f"{inside} it).")
    elif fc:
        text += (f" The calibration forecasts {_pct(fc.get('expected_zero_std_share'))} zero-std groups "
                 f"({lvl}interval{_interval(fc.get('share_ci'))}); no step was logged here to compare.")
    elif tf.get("skipped"):
        text += f" No zero-std forecast: {tf['skipped']}."
    draws = s.get("draws") or {}
    if draws.get("dynamic_sampling"):
        text += (f" Dynamic sampling drew {_n(draws.get('rollouts_drawn'), 'rollout')} in {_n(draws.get('rounds'), 'round')} "
                 f"and kept {draws.get('groups_kept')} of {_n(draws.get('groups_drawn'), 'group')}.")
    return [Finding(step, title, text, "zero_std_forecast")]


def evaluate_findings(step: str, s: dict[str, Any]) -> list[Finding]:
    """Each evaluated model's avg@k with its interval, per benchmark and budget; the first model
    (the pipeline's: the checkpoint training started from) is the one the others are set against."""
    models, results, out = list(s.get("models") or (s.get("results") or {}).keys()), s.get("results") or {}, []
    k = s.get("k")
    for bench, meta in (s.get("benchmarks") or {bench: {} for m in results.values() for bench in m}).items():
        cells = {m: results.get(m, {}).get(bench, {}) for m in models}
        budgets = sorted({b for c in cells.values() for b in c}, key=budget_sort_key)
        if not budgets:
            continue
        name = meta.get("name", bench)
        top = budgets[-1]

        def at(m: str, b: str, cells: dict[str, Any] = cells) -> str:  # "12% [5%, 20%]": avg@k and its interval
            r = cells[m].get(b) or {}
            return f"{_pct(r.get('avg'))}{_interval(r.get('avg_ci'))}"

        problems = next((c[top].get("problems") for c in cells.values() if top in c), None)
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
            r = cells[m].get(top) or {}
            if r.get("truncated") and r.get("problems") and r.get("samples"):
                cut.append(f"{r['truncated']} of {r['problems'] * r['samples']} ({m})")
        if cut:
            parts.append(f"Samples cut off by the budget L = {top}: " + ", ".join(cut) + ".")
        cis = [(cells[m].get(top) or {}).get("avg_ci") for m in models]
        if len(models) > 1 and all(isinstance(c, (list, tuple)) and len(c) == 2 for c in cis):
            overlap = max(c[0] for c in cis) <= min(c[1] for c in cis)
            parts.append("The intervals overlap: no difference is shown at this size." if overlap
                         else "The intervals do not overlap.")
        interval = next((c[top].get("interval") for c in cells.values() if top in c and c[top].get("interval")), None)
        parts.append(f"Intervals: {interval}." if interval else "")
        out.append(Finding(step, title, " ".join(p for p in parts if p), "accuracy_vs_budget"))
    return out


def findings(steps: Sequence[tuple[str, dict[str, Any]]], run_summary: dict[str, Any] | None = None) -> list[Finding]:
    """Every finding of a run, in step order.

    Args:
        steps: ``(step name, its summary.json)`` for each step (one for a single stage run).
        run_summary: The pipeline's own ``summary.json`` (its ``step_seconds``), if any.

    Returns:
        The findings; a stage without a story (e.g. ``thesis``) contributes none.
    """
    by_stage = {"calibrate": calibration_findings, "export": export_findings, "train": train_findings,
                "evaluate": evaluate_findings}
    out: list[Finding] = []
    for step, s in sorted(steps, key=lambda st: _story_order(*st)):
        stage = s.get("stage")
        if stage == "synthesize":
            fn = goose_findings if s.get("method") == "goose" else synthesis_findings
        else:
            fn = by_stage.get(stage)
        if fn:
            out.extend(fn(step, s))
    secs = (run_summary or {}).get("step_seconds") or {}
    if secs:
        slow = max(secs, key=secs.get)
        total = sum(secs.values())
        out.append(Finding(
            slow, f"The steps took {format_seconds(total)}; the slowest was {slow} ({format_seconds(secs[slow])})",
            "Per step: " + ", ".join(f"{k} {format_seconds(v)}" for k, v in secs.items())
            + " (the figures step is in manifest.json).",
        ))
    return out


def _story_order(step: str, s: dict[str, Any]) -> tuple[int, str]:
    """The headline first: live calibrations (N samples of a policy at a budget L; a difficulty
    study before the others), then recorded ones (a proxy), MBS, direct, Goose, export, train,
    evaluate, the rest."""
    stage, method = s.get("stage"), s.get("method")
    if stage == "calibrate":
        rank = (0 if s.get("by_difficulty") else 1) if s.get("budgets") else 2  # "budgets": the live policies' L
    else:
        rank = {("synthesize", "mbs"): 3, ("synthesize", "direct"): 4, ("synthesize", "goose"): 5}.get(
            (stage, method), {"export": 6, "train": 7, "evaluate": 8}.get(stage, 9))
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
