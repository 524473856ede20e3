"""What later prompts receive of a thinking teacher's Stage-1 trace (mbs/synth/traces.py)."""

from __future__ import annotations

import pytest

from mbs.synth.traces import blueprint, keep_end, trace_for_prompt

REASONING = "Let me think. " * 300 + "So the count is 12."
SOLUTION = "Split by the number of parts; summing the compositions gives \\boxed{12}."


def test_solution_only_by_default_and_the_full_blueprint_on_request():
    assert blueprint(SOLUTION, REASONING) == SOLUTION
    assert blueprint(SOLUTION, REASONING, "reasoning") == REASONING + "\n\n" + SOLUTION
    assert blueprint(SOLUTION, None, "reasoning") == SOLUTION  # a teacher that does not think
    with pytest.raises(ValueError, match="mbs.trace_context='thinking': valid values are solution, reasoning"):
        blueprint(SOLUTION, REASONING, "thinking")


def test_clipping_keeps_the_conclusion_not_the_beginning():
    clipped = trace_for_prompt(SOLUTION, REASONING, "reasoning", 200)
    assert len(clipped) <= 200 and clipped.startswith("[...] ")
    assert clipped.endswith("\\boxed{12}.") and "So the count is 12." in clipped
    assert not clipped.startswith("[...] Let me think. Let me think. " * 10)
    assert keep_end("short", 200) == "short" and keep_end(None, 10) == ""
    # no half word at the cut
    assert keep_end("alpha beta gamma delta epsilon", 20) == "[...] delta epsilon"
    assert keep_end("alpha beta gammadelta epsilon", 20) == "[...] epsilon"
