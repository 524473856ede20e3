"""The peer grading suite: other projects' own grader test cases, and raw math-verify.

``tests/data/grading_cases_peers.jsonl`` holds (response, gold, expected) rows converted
from the unit tests (or documented rules) of other graders, each with its ``source``
(repository@commit, file, test). ``disputed`` marks a row whose label peers disagree on
(with why); ``mbs`` then records the verdict mbs gives on purpose. ``deliberate`` marks a
row math-verify alone gets right and mbs does not, with the documented rule that decides it.
``tests/data/grading_cases_answerless.jsonl`` is the table of text that states no answer.

Used by ``tests/verify/test_peer_cases.py`` and ``tests/benchmarks/bench_grader_peers.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "data"
PEERS = DATA / "grading_cases_peers.jsonl"
ANSWERLESS = DATA / "grading_cases_answerless.jsonl"


def load(path: Path = PEERS) -> list[dict]:
    """The rows of a case file, in order."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def project(case: dict) -> str:
    """The project a case comes from (``owner/name`` without the commit)."""
    return case["source"].split("@")[0].split(" ")[0]


def raw_math_verify(response: str, gold: str) -> bool:
    """Raw math-verify as RLVR code calls it (verl's ``reward_score/math_verify``): the
    gold boxed and read as LaTeX, the response read with math-verify's default extraction;
    math-verify's own 5 s timeouts on (main thread only). ``False`` on any error."""
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

    try:
        golds = parse("\\boxed{" + gold + "}", [LatexExtractionConfig()])
        preds = parse(response, [ExprExtractionConfig(), LatexExtractionConfig()])
        return bool(verify(golds, preds))
    except Exception:  # noqa: BLE001 - a crash is a wrong verdict for the benchmark
        return False
