"""A deterministic scripted teacher and students for synthesis tests (no model).

:class:`ScriptedBackend` satisfies :class:`mbs.llm.base.Backend`. It plays a role chosen by
``skill``: ``teacher`` answers MBS/direct teacher prompts (recognised by the literal text of
each template before its first placeholder), ``weak`` and ``main`` are students that solve a
problem at a scripted rate.

Two worlds:

* ``branches``: a hand-written script over problems tagged ``[[TOKEN]]`` that drives MBS
  through every branch (trace rejected, decomposition re-prompted, effectivity failed, depth
  limit, leaf discarded, parent trials exhausted, qualified, ...). :data:`SEEDS` are its hard
  seeds; the expected outcome of each step is written next to the script.
* ``generic``: problems carry ``<<a=ANSWER;d=RATE>>``; the teacher writes random-but-seeded
  decompositions, variants and parents (hash of prompt and sample index), so a benchmark can
  grow many seeds into varied trees. ``d`` is the weak student's pass rate.

Students are exact in ``branches``: sample ``i`` is correct iff ``i % 4 < rate * 4``, so with
N = 4 a rate of 0.5 gives exactly 2 of 4. A student shown worked examples whose solution
contains ``[[HELP]]`` (``<<help>>`` in ``generic``) solves at its conditioned rate.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

from mbs.io import RunDir
from mbs.llm.base import BackendError, BackendStats, ChatRequest, Completion
from mbs.prompts import load_template
from mbs.records import Calibration, Problem

TOKEN = re.compile(r"\[\[([A-Z0-9_]+)\]\]")
GENERIC = re.compile(r"<<a=(-?\d+);d=([0-9.]+)>>")

#: Teacher prompt kinds and the template each is rendered from.
KINDS = {
    "trace": "mbs_trace_v1",
    "decompose": "mbs_decompose_v1",
    "leaf": "mbs_leaf_v1",
    "compose": "mbs_compose_v2",
    "ground": "mbs_ground_v1",
    "judge": "mbs_judge_v1",
    "direct": "direct_variant_v1",
}

GARBAGE = "I am not sure how to do this."


def item(token: str, text: str, answer: str | None, solved: str | None = None, help: bool = False) -> str:
    """One problem in the tagged format; ``solved`` is the answer its solution boxes (default ``answer``)."""
    boxed = answer if solved is None else solved
    sol = f"<solution>Step by step{' [[HELP]]' if help else ''}, so the result is \\boxed{{{boxed}}}.</solution>"
    ans = "" if answer is None else f"\n<answer>{answer}</answer>"
    return f"<problem>[[{token}]] {text}</problem>\n{sol}{ans}"


def sub(token: str, text: str, answer: str | None, solved: str | None = None, help: bool = False) -> str:
    return f"<subproblem>\n{item(token, text, answer, solved, help)}\n</subproblem>\n"


#: Hard seeds of the ``branches`` world.
SEEDS = [
    Problem(id="toy/main", data_source="mbs/math/toy", prompt="[[ROOT]] In how many ways can 12 be written as an ordered sum of parts?", ground_truth="12"),
    Problem(id="toy/ref", data_source="mbs/math/toy", prompt="[[REF]] What is the seventh prime minus ten?", ground_truth="7",
            reference_solution="The seventh prime is 17, so the answer is \\boxed{7}."),
    Problem(id="toy/none", data_source="mbs/math/toy", prompt="[[NONE]] What is 1 + 2?", ground_truth="3"),
]

#: (kind, token) -> teacher output per sample index (an index past the end gets the last one).
SCRIPT: dict[tuple[str, str], list[str]] = {
    # Stage 1: ROOT's sample 0 is wrong (trace rejected), sample 1 verifies. REF: every trace is
    # wrong, the reference teacher supplies one. NONE: wrong and no reference: seed discarded.
    ("trace", "ROOT"): ["I think it is \\boxed{11}.", "Carefully: \\boxed{12}."],
    ("trace", "REF"): ["\\boxed{8}"],
    ("trace", "NONE"): ["\\boxed{4}"],
    # Stage 2 at ROOT: attempt 0 does not parse; attempt 1 has a self-referring subproblem, one
    # whose answer does not match its solution, one valid but unhelpful (effectivity fails),
    # and a fourth beyond K=3; attempt 2 restates the parent (its text, then a* as an answer:
    # both rejected, no valid subproblem); attempt 3 is valid and helps the main student only
    # (passes): the first try and N_d=3 retries.
    ("decompose", "ROOT"): [
        GARBAGE,
        sub("BAD1", "Using the original problem, find the number of parts.", "4")
        + sub("NOHELP", "What is 2 + 3?", "5")
        + sub("BAD3", "What is 2 + 2?", "4", solved="5")
        + sub("EXTRA", "What is 0 + 1?", "1"),
        sub("RESTATE", "In how many ways can 12 be written as an ordered sum of parts?", "11", help=True)
        + sub("ASTAR", "How many compositions does twelve have?", "12", help=True),
        sub("A", "What is 1 + 1?", "2", help=True) + sub("B", "What is 1 + 2?", "3", help=True),
    ],
    # A: a block without <answer>, then prose: decomposition fails 1 + N_d=3 times -> A is a leaf.
    ("decompose", "A"): ["<subproblem>\n" + item("A1", "What is 0 + 0?", None) + "\n</subproblem>", GARBAGE],
    # B: one valid helpful subproblem C (at depth 2 = D: a leaf by the depth limit).
    ("decompose", "B"): [sub("C", "What is 0 + 1?", "1", help=True)],
    ("decompose", "REF"): [GARBAGE],
    # Stage 3 leaves: A's variant 0 is too easy for the weak student (discarded above
    # alpha_leaf), variant 1 is kept, variant 2 does not parse. C: variant 0 kept, 1 does not
    # verify, 2 too easy.
    ("leaf", "A"): [item("AV0", "What is 4 + 4?", "8"), item("AV1", "What is 4 + 5?", "9"), GARBAGE],
    ("leaf", "C"): [item("CV0", "What is 5 + 5?", "10"), item("CV1", "What is 1 + 2?", "3", solved="4"), item("CV2", "What is 3 + 3?", "6")],
    ("leaf", "REF"): [GARBAGE],
    # Composition at B: trial 0 is too easy (above alpha_parent), trial 1 is kept (the target
    # never solves it: unqualified); with alpha_parent=0.3 both are discarded: trials exhausted.
    ("compose", "B"): [item("BP0", "What is 10 + 10?", "20"), item("BP1", "What is 10 + 11?", "21")],
    # Composition at ROOT (from A's kept variant and B's kept parent): trial 0 too easy, trial 1 kept.
    ("compose", "ROOT"): [item("RP0", "What is 15 + 15?", "30"), item("RP1", "What is 15 + 16?", "31")],
    # Direct baseline: a qualified one, prose, one the target always solves, a self-reference,
    # one the target never solves.
    ("direct", "ROOT"): [
        item("DV0", "What is 20 + 20?", "40"), GARBAGE, item("DV2", "What is 21 + 21?", "42"),
        item("DV3", "As in the problem above, what is 21 + 22?", "43"), item("DV4", "What is 22 + 22?", "44"),
    ],
    ("direct", "REF"): [item("DR0", "What is 30 + 30?", "60")],
    ("direct", "NONE"): [GARBAGE],
    # Judges: AV1 is accepted, RP1 is rejected by every judge, CV0 gets no verdict (grounded
    # problems carry a trailing G).
    ("judge", "AV1"): ["<well_posed>yes</well_posed>\n<answer_correct>yes</answer_correct>"],
    ("judge", "AV1G"): ["<well_posed>yes</well_posed>\n<answer_correct>yes</answer_correct>"],
    ("judge", "RP1"): ["<well_posed>no</well_posed>\n<answer_correct>no</answer_correct>"],
    ("judge", "RP1G"): ["<well_posed>yes</well_posed>\n<answer_correct>no</answer_correct>"],
}

#: Answers students must give for each token (teacher-written problems included).
ANSWERS = {
    "ROOT": "12", "REF": "7", "NONE": "3", "A": "2", "B": "3", "C": "1", "NOHELP": "5",
    "AV0": "8", "AV1": "9", "CV0": "10", "CV2": "6", "BP0": "20", "BP1": "21", "RP0": "30", "RP1": "31",
    "DV0": "40", "DV2": "42", "DV4": "44", "DR0": "60",
    "AV1G": "9", "CV0G": "10", "RP1G": "31",
}

#: skill -> token -> pass rate (unlisted: 0). ``@cond``: rate when shown [[HELP]] examples.
RATES = {
    "weak": {"AV0": 1.0, "AV1": 0.5, "CV0": 0.25, "CV2": 1.0, "BP0": 1.0, "BP1": 0.5, "RP0": 1.0, "RP1": 0.5},
    "main": {
        "AV1": 0.5, "CV0": 0.5, "RP1": 0.5, "DV0": 0.5, "DV2": 1.0, "DR0": 0.5,
        "AV1G": 0.5, "CV0G": 0.5, "RP1G": 0.5,
        "ROOT@cond": 0.5, "B@cond": 0.5,
    },
}
#: Tokens whose student responses hit the budget (finish reason ``length``): CV0 is in the
#: Goldilocks band for the target but has no complete correct response -> not qualified.
TRUNCATED = {"CV0"}


def _hash(*parts: object) -> int:
    return int.from_bytes(hashlib.sha256("|".join(map(str, parts)).encode()).digest()[:8], "little")


def _prefix(template: str) -> str:
    text = load_template(template)
    m = re.search(r"\{[a-z_]+\}", text)
    return text[: m.start()] if m else text


class ScriptedBackend:
    """A scripted teacher or student (see the module docstring).

    Args:
        skill: ``teacher``, ``weak`` or ``main``.
        world: ``branches`` or ``generic``.
        fail_after: Raise :class:`BackendError` once this many samples were produced (a kill).
        name: Backend kind for the cache key.
        cut: Tokens (``ROOT``, ...) whose Stage-1 traces end at the token limit: the scripted text
            (an early boxed answer) with finish reason ``length``.
    """

    preferred_batch = 8

    def __init__(self, skill: str = "teacher", world: str = "branches", fail_after: int | None = None, name: str = "scripted",
                 cut: Sequence[str] = ()):
        if skill not in ("teacher", "weak", "main"):
            raise ValueError(f"skill={skill!r}")
        self.skill, self.world, self.fail_after, self.name = skill, world, fail_after, name
        self.cut = set(cut)
        self.stats = BackendStats()
        self.requests: list[ChatRequest] = []
        self.prefixes = {kind: _prefix(t) for kind, t in KINDS.items()}

    @property
    def model_id(self) -> str:
        return f"scripted-{self.world}-{self.skill}"

    def generate(self, requests: Sequence[ChatRequest]) -> list[list[Completion]]:
        out = []
        for req in requests:
            self.requests.append(req)
            comps = []
            for idx in req.indices:
                if self.fail_after is not None and self.stats.samples >= self.fail_after:
                    raise BackendError("scripted backend: killed")
                text, finish = (self._teach(req, idx), self._finish(req)) if self.skill == "teacher" else self._solve(req, idx)
                comps.append(Completion(text=text, prompt_tokens=len(str(req.messages).split()),
                                        completion_tokens=len(text.split()), finish_reason=finish, sample_index=idx))
                self.stats.samples += 1
            self.stats.calls += 1
            out.append(comps)
        return out

    def close(self) -> None:
        pass

    # -- teacher -------------------------------------------------------------------------

    def kind(self, prompt: str) -> str:
        for kind, prefix in self.prefixes.items():
            if prompt.startswith(prefix):
                return kind
        raise AssertionError(f"scripted teacher: unknown prompt {prompt[:80]!r}")

    def _finish(self, req: ChatRequest) -> str:
        """``length`` for the traces of the tokens in ``cut``, else ``stop``."""
        prompt = req.messages[-1]["content"]
        m = TOKEN.search(prompt)
        return "length" if self.kind(prompt) == "trace" and m and m.group(1) in self.cut else "stop"

    def _teach(self, req: ChatRequest, idx: int) -> str:
        prompt = req.messages[-1]["content"]
        kind = self.kind(prompt)
        body = prompt[len(self.prefixes[kind]):]
        if self.world == "generic":
            return _generic_teacher(kind, body, idx)
        m = TOKEN.search(body)
        if kind == "ground" and m:
            return item(m.group(1) + "G", "Grounded on the documents: same question.", ANSWERS.get(m.group(1), "0"))
        outs = SCRIPT.get((kind, m.group(1) if m else ""), [GARBAGE])
        return outs[min(idx, len(outs) - 1)]

    # -- students ------------------------------------------------------------------------

    def _solve(self, req: ChatRequest, idx: int) -> tuple[str, str]:
        question = req.messages[-1]["content"]
        examples = " ".join(m["content"] for m in req.messages if m["role"] == "assistant")
        if self.world == "generic":
            return _generic_student(self.skill, question, examples, idx)
        m = TOKEN.search(question)
        token = m.group(1) if m else ""
        rates = RATES[self.skill]
        rate = rates.get(token, 0.0)
        if "[[HELP]]" in examples:
            rate = rates.get(f"{token}@cond", rate)
        correct = idx % 4 < round(rate * 4)
        answer = ANSWERS.get(token, "0") if correct else "-1"
        return f"Let me think. The answer is \\boxed{{{answer}}}.", "length" if token in TRUNCATED else "stop"


# -- the generic world ---------------------------------------------------------------------


def _marker(text: str) -> tuple[int, float]:
    m = GENERIC.search(text)
    return (int(m.group(1)), float(m.group(2))) if m else (0, 0.0)


def _gitem(answer: int, d: float, h: int, help: bool = False) -> str:
    d = min(1.0, max(0.0, round(d, 2)))
    return (
        f"<problem>Compute the value of expression #{h % 100000} <<a={answer};d={d}>>.</problem>\n"
        f"<solution>Working{' <<help>>' if help else ''}: \\boxed{{{answer}}}</solution>\n<answer>{answer}</answer>"
    )


def _generic_teacher(kind: str, body: str, idx: int) -> str:
    """Seeded teacher of the generic world: outcome drawn from a hash of (prompt, index)."""
    a, d = _marker(body)
    h = _hash(kind, body, idx)
    r = h % 10
    if kind == "trace":
        return f"So \\boxed{{{a if r < 6 else a + 1}}}." if GENERIC.search(body) else GARBAGE
    if kind == "decompose":
        if r < 3:
            return GARBAGE
        k = 1 + h % 3
        return "".join(f"<subproblem>\n{_gitem(a + j + 1, d + 0.3, h + j, help=r >= 5)}\n</subproblem>\n" for j in range(k))
    if kind == "leaf":
        return GARBAGE if r < 2 else _gitem(a * 2 + idx, d - 0.1 * (1 + h % 6), h)
    if kind == "compose":
        kids = [float(x) for x in re.findall(r"d=([0-9.]+)", body.split("New subproblems:")[-1])] or [d]
        return GARBAGE if r < 2 else _gitem(a + 100 + idx, min(kids) - 0.1 * (h % 5), h)
    if kind == "direct":
        return GARBAGE if r < 3 else _gitem(a + 50 + idx, d + 0.1 * (h % 7), h)
    if kind == "ground":
        return _gitem(a, d, h)
    return "<well_posed>yes</well_posed>\n<answer_correct>" + ("yes" if r < 8 else "no") + "</answer_correct>"


def _generic_student(skill: str, question: str, examples: str, idx: int) -> tuple[str, str]:
    a, d = _marker(question)
    rate = d if skill == "weak" else min(1.0, d + 0.2)
    if "<<help>>" in examples:
        rate = min(1.0, rate + 0.3)
    correct = (_hash(question, idx) % 1000) < rate * 1000
    return f"The answer is \\boxed{{{a if correct else a - 1}}}.", "stop"


def generic_seeds(n: int) -> list[Problem]:
    """``n`` hard seeds of the generic world (answers and weak-student rates vary by seed)."""
    return [
        Problem(id=f"gen/{i}", data_source="mbs/math/gen",
                prompt=f"Seed problem {i}: compute it <<a={10 + i};d={(_hash('d', i) % 30) / 100}>>.",
                ground_truth=str(10 + i))
        for i in range(n)
    ]


# -- configuration helpers -------------------------------------------------------------------


def backend_node(skill: str, world: str = "branches", **extra: object) -> dict:
    return {"_target_": "support.scripted_teacher.ScriptedBackend", "skill": skill, "world": world, "label": skill, **extra}


def configure(cfg, world: str = "branches", budget: int = 64, teacher_extra: dict | None = None, judges: bool = False) -> None:
    """Point a composed synthesize config at the scripted world: two students (weak first,
    target ``main``), a teacher pool of the scripted teacher and ``reference``."""
    from omegaconf import open_dict

    with open_dict(cfg):
        cfg.students.policies = {
            "weak": {"name": "weak", "source": "live", "backend": backend_node("weak", world), "budget": budget, "model": None},
            "main": {"name": "main", "source": "live", "backend": backend_node("main", world), "budget": budget, "model": None},
        }
        cfg.students.target = "main"
        cfg.teacher.pool = [
            {"name": "scripted", "source": "live", "backend": backend_node("teacher", world, **(teacher_extra or {})),
             "max_tokens": 256, "temperature": 0.7},
            {"name": "reference", "source": "reference", "backend": None, "max_tokens": 0, "temperature": 0.0},
        ]
        if judges:
            cfg.mbs.judges.pool = [
                {"name": f"judge{i}", "source": "live", "backend": backend_node("teacher", world, name=f"judge{i}"),
                 "max_tokens": 64, "temperature": 0.0}
                for i in range(2)
            ]


def write_calibration_dir(path, seeds: Sequence[Problem], students: Sequence[str] = ("weak", "main"), budget: int = 64, n: int = 4):
    """A minimal calibration run directory: the hard seeds, and a failed_all calibration of each
    seed for each student (acc(S, p) = 0)."""
    out = RunDir(path, "calibrate")
    with out.shard("hard_seeds", Problem) as s:
        s.append(seeds)
    with out.shard("calibrations", Calibration) as s:
        s.append(
            Calibration(problem_id=p.id, policy=st, budget=budget, n=n, n_target=n, successes=0, ungraded=0,
                        pass_rate=0.0, band="failed_all", complete_correct=False)
            for p in seeds for st in students
        )
    return out.path
