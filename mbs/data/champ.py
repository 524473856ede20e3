"""CHAMP (Concept and Hint-Augmented Math Problems) from the installed ``champ-dataset`` package.

270 competition problems with step-wise solutions, hints, concepts, free-text gold answers,
the recorded conversations of GPT-3.5, GPT-4, GPT-4 Turbo and PaLM 2 Medium under 18 prompt
settings, and first-wrong-step (FWS) annotations of some of those conversations
(Mao et al., 2024, "CHAMP: A Competition-level Dataset for Fine-Grained Analyses of LLMs'
Mathematical Reasoning Capabilities").

The dataset JSON is read directly from the package folder (found with ``importlib.util.find_spec``,
which runs no package code).

Gold answers are free text. :func:`convert_gold` turns each into a ground truth the math
verifier can check, or marks it ``unverifiable:<why>`` (yes/no answers, prose statements,
bounds, assignments of several variables...).
"""

from __future__ import annotations

import importlib.util
import json
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from mbs.records import Problem
from mbs.textmath import plain_to_latex

DATA_SOURCE = "mbs/math/champ"
RECORDED_MODELS = ("GPT-3.5", "GPT-4", "GPT-4 Turbo", "PaLM 2 Medium")


def champ_json_path() -> Path:
    """Path of ``v0.json`` inside the installed ``champ-dataset`` package.

    Raises:
        FileNotFoundError: ``champ-dataset`` is not installed.
    """
    spec = importlib.util.find_spec("champ_dataset")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("CHAMP needs the PyPI package champ-dataset: pip install champ-dataset")
    for folder in spec.submodule_search_locations:
        path = Path(folder) / "dataset_files" / "v0.json"
        if path.is_file():
            return path
    raise FileNotFoundError(f"dataset_files/v0.json not found in {list(spec.submodule_search_locations)}")


@lru_cache(maxsize=1)
def load_raw() -> dict[str, Any]:
    """The raw CHAMP dict: ``problems``, ``concepts``, ``hints`` (cached per process)."""
    with open(champ_json_path(), encoding="utf-8") as f:
        return json.load(f)


# --------------------------------------------------------------------------------------
# Gold answers
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GoldConversion:
    """Result of converting one free-text CHAMP gold answer.

    Attributes:
        ground_truth: LaTeX the math verifier checks against, or ``None``.
        answer_type: ``math`` or ``unverifiable:<why>``.
        rule: Which conversion rule applied (reported in counts).
    """

    ground_truth: str | None
    answer_type: str
    rule: str


_PAREN_NOTE = re.compile(r"\s*\((?:i\.e\.,?|no such|none of|no ).*\)\s*$", re.I)
_ONLY_VALUE = re.compile(r"^(.+?) is the only possible value$", re.I)
_LIMIT = re.compile(r"^(?:the limit exists and is equal to|the only possible value for the limit is)\s+(.+)$", re.I)
_COUNT_NOUN = re.compile(r"^(\d+)\s+(values?|inequalities|pairs?|roots?|times|numbers?|solutions?)$", re.I)
_AT_MOST_ZERO = re.compile(r"^at most 0\b", re.I)
_EXACTLY_ONE = re.compile(r"^exactly one\b", re.I)
_NUM_LIST = re.compile(r"^-?\d+(?:/\d+)?(?:\s*(?:,|and)\s*-?\d+(?:/\d+)?)+$")
_SINGLE_VAR = re.compile(r"^([a-z])\s*=\s*(.+?)(?:\s+and\s+\1\s*=\s*(.+))?$")
_INTERVAL = re.compile(r"^[\[(]\s*-?[\w/.]+\s*,\s*-?[\w/.]+\s*[\])]$")
_NONEXIST = re.compile(
    r"^(no\b|there (?:are|is) no|.*\bdoes not exist|.*\bnot possible|infinitely many|it is not)", re.I
)


def convert_gold(raw: str) -> GoldConversion:
    """Convert a CHAMP free-text gold answer into a verifiable ground truth.

    Rules, in order: drop "(i.e., ...)" notes; take the closed form of "A, or equivalently B";
    the exact value of "A, or approximately B"; unwrap "X is the only possible value",
    "The limit exists and is equal to X", counts with a noun ("98 values"), "At most 0 ..."
    (= 0), "Exactly one ..." (= 1); lists of numbers become sets; ``x=a and x=b`` becomes the
    set {a, b}; yes/no answers, non-existence statements, several-variable assignments,
    functional equations and prose stay unverifiable. Everything else goes through
    :func:`mbs.textmath.plain_to_latex`.

    Args:
        raw: CHAMP ``_answer`` text, e.g. ``"C(10, 5), or equivalently 252"``.
    """
    s = raw.strip()
    rule = []
    if _PAREN_NOTE.search(s):
        s = _PAREN_NOTE.sub("", s).strip()
        rule.append("note_dropped")
    if ", or equivalently " in s:
        first, _, second = s.partition(", or equivalently ")
        s = second if plain_to_latex(second) is not None else first
        rule.append("equivalent_form")
    elif ", or approximately " in s or ", or an equivalent form" in s:
        s = s.split(",")[0] if s.count(",") == 1 or "C(" not in s else s.split(", or ")[0]
        rule.append("exact_form")
    low = s.lower()
    if low in ("yes", "no") or low.startswith(("yes,", "no,")):
        return GoldConversion(None, "unverifiable:yes_no", "yes_no")
    for pattern, name in ((_ONLY_VALUE, "only_value"), (_LIMIT, "limit_value")):
        m = pattern.match(s)
        if m:
            s = m.group(1).strip()
            rule.append(name)
            break
    m = _COUNT_NOUN.match(s)
    if m:
        s, rule = m.group(1), rule + ["count_with_noun"]
    elif _AT_MOST_ZERO.match(s):
        s, rule = "0", rule + ["at_most_zero"]
    elif _EXACTLY_ONE.match(s):
        s, rule = "1", rule + ["exactly_one"]
    if _NONEXIST.match(s):
        return GoldConversion(None, "unverifiable:nonexistence", "+".join(rule + ["nonexistence"]))
    if _INTERVAL.match(s):
        return GoldConversion(s.replace(" ", ""), "math", "+".join(rule + ["interval"]))
    if s.startswith("sum_"):
        tex = plain_to_latex(s)
        if tex is not None:
            return GoldConversion(tex, "math", "+".join(rule + ["sum"]))
    if _NUM_LIST.match(s):
        items = [x.strip() for x in re.split(r",|\band\b", s) if x.strip()]
        tex = [plain_to_latex(x) for x in items]
        return GoldConversion(", ".join(tex), "math", "+".join(rule + ["number_set"]))  # type: ignore[arg-type]
    m = _SINGLE_VAR.match(s)
    if m and "," not in s and "=" not in m.group(2) + (m.group(3) or ""):
        values = [v for v in (m.group(2), m.group(3)) if v]
        tex = [plain_to_latex(v) for v in values]
        if all(t is not None for t in tex):
            return GoldConversion(", ".join(tex), "math", "+".join(rule + ["single_variable"]))  # type: ignore[arg-type]
    if "=" in s:
        kind = "functional" if re.search(r"\b[a-z]\(x\)", s) else "assignment"
        return GoldConversion(None, f"unverifiable:{kind}", "+".join(rule + [kind]))
    if re.search(r"[<>≤≥]", s) or " for all " in low:
        return GoldConversion(None, "unverifiable:statement", "+".join(rule + ["statement"]))
    if "..." in s:
        return GoldConversion(None, "unverifiable:ellipsis", "+".join(rule + ["ellipsis"]))
    tex = plain_to_latex(s)
    if tex is None:
        return GoldConversion(None, "unverifiable:prose", "+".join(rule + ["prose"]))
    plain_number = re.fullmatch(r"-?\d+(?:\.\d+)?", s) is not None
    return GoldConversion(tex, "math", "+".join(rule + ["number" if plain_number else "expression"]))


# --------------------------------------------------------------------------------------
# Problems
# --------------------------------------------------------------------------------------


def _text(d: dict[str, Any] | None) -> str:
    return "" if d is None else (d.get("_text") or (d.get("_raw_text") or "").replace("@@", ""))


def problem_from_raw(pid: str, p: dict[str, Any], raw: dict[str, Any]) -> Problem:
    """Build a :class:`Problem` from one raw CHAMP problem dict.

    Metadata keeps: category, raw answer, conversion rule, solution steps (text and the
    concept/hint indices of each), hints and concepts (id and text).
    """
    conv = convert_gold(p.get("_answer") or (p.get("_raw_answer") or "").replace("@@", ""))
    ch_list = p.get("ch_list") or []
    hints = [{"id": h, "text": _text(raw["hints"].get(h))} for h in ch_list if h.startswith("H_")]
    concepts = [{"id": c, "text": _text(raw["concepts"].get(c))} for c in ch_list if c.startswith("C_")]
    steps = [
        {"text": _text(st), "ch_idxs": list(st.get("ch_idxs") or [])}
        for st in ((p.get("solution") or {}).get("steps") or [])
    ]
    return Problem(
        id=f"champ/{pid}",
        data_source=DATA_SOURCE,
        prompt=_text(p),
        ground_truth=conv.ground_truth,
        answer_type=conv.answer_type,
        reference_solution="\n".join(st["text"] for st in steps) or None,
        metadata={
            "category": p.get("category"),
            "raw_answer": p.get("_answer"),
            "gold_rule": conv.rule,
            "steps": steps,
            "ch_list": list(ch_list),
            "hints": hints,
            "concepts": concepts,
        },
    )


def load_champ(include_unverifiable: bool = False) -> list[Problem]:
    """All 270 CHAMP problems in dataset order (only auto-verifiable ones unless asked).

    Args:
        include_unverifiable: Keep problems whose gold answer is ``unverifiable:*``.
    """
    raw = load_raw()
    problems = [problem_from_raw(pid, p, raw) for pid, p in raw["problems"].items()]
    return problems if include_unverifiable else [p for p in problems if p.verifiable]


def gold_report() -> dict[str, Any]:
    """Counts of CHAMP gold answers by answer type and by conversion rule."""
    raw = load_raw()
    by_type: dict[str, int] = {}
    by_rule: dict[str, int] = {}
    for p in raw["problems"].values():
        conv = convert_gold(p["_answer"])
        by_type[conv.answer_type] = by_type.get(conv.answer_type, 0) + 1
        by_rule[conv.rule] = by_rule.get(conv.rule, 0) + 1
    return {"total": len(raw["problems"]), "by_answer_type": by_type, "by_rule": by_rule}


# --------------------------------------------------------------------------------------
# Recorded conversations (the `recorded` policy source)
# --------------------------------------------------------------------------------------


def setting_kind(setting: str) -> str:
    """Classify a CHAMP prompt setting.

    Returns:
        ``sample`` (no hints, no partial solution: 0-/5-shot and every "w/o H" setting),
        ``hint`` (problem-specific hints in the prompt: every "w/ H" setting) or
        ``partial_solution`` ("1/3 Soln", "2/3 Soln").
    """
    if setting.endswith("Soln"):
        return "partial_solution"
    if setting.endswith("w/ H"):
        return "hint"
    return "sample"


@dataclass(frozen=True)
class RecordedAnswer:
    """One recorded model answer.

    Attributes:
        model: ``GPT-3.5``, ``GPT-4``, ``GPT-4 Turbo`` or ``PaLM 2 Medium``.
        setting: CHAMP prompt setting, e.g. ``0-Shot`` or ``Direct C w/ H``.
        kind: :func:`setting_kind` of the setting.
        solution: The model's full solution text.
        final: The model's one-sentence summary of its answer (its final answer).
        finish_reason: ``length`` when CHAMP marks the solution as cut off, else ``stop``.
        fws_correct: From the first-wrong-step annotation, when one exists: True when the
            annotator found no mistake, False when they marked a wrong step, else None.
    """

    model: str
    setting: str
    kind: str
    solution: str
    final: str
    finish_reason: str
    fws_correct: bool | None


def recorded_answers(pid: str, model: str) -> list[RecordedAnswer]:
    """Every recorded answer of ``model`` to CHAMP problem ``pid`` (e.g. ``P_Combinatorics_1``).

    Raises:
        KeyError: Unknown problem id or model name (lists the valid models).
    """
    if model not in RECORDED_MODELS:
        raise KeyError(f"unknown CHAMP recorded model {model!r}; valid: {list(RECORDED_MODELS)}")
    p = load_raw()["problems"][pid]
    fws = p.get("fws_annotations") or {}
    out = []
    for key, conv in (p.get("conversations") or {}).items():
        m, _, setting = key.partition("|")
        if m != model:
            continue
        replies = [msg for msg in conv.get("messages") or [] if (msg.get("role") or "").startswith("Model.")]
        if not replies:
            continue
        solution = replies[0].get("text") or ""
        final = (replies[-1].get("text") or "") if len(replies) > 1 else ""
        length = any(msg.get("error") in ("LENGTH_CURRENT", "LENGTH_PREVIOUS") for msg in replies)
        ann = fws.get(key)
        fws_correct = None if ann is None else ann.get("start_idx") is None
        out.append(
            RecordedAnswer(
                model=model,
                setting=setting,
                kind=setting_kind(setting),
                solution=solution,
                final=final,
                finish_reason="length" if length else "stop",
                fws_correct=fws_correct,
            )
        )
    return out
