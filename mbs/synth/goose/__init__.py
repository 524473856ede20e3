"""Golden Goose (Lu et al., 2026): multiple-choice RLVR items from passages with a masked
reasoning span.

Ladder: :mod:`~mbs.synth.goose.settings` (the typed, frozen ``goose`` settings) <
:mod:`~mbs.synth.goose.sources` (passages), :mod:`~mbs.synth.goose.replies` (the
teacher's tagged, LaTeX-safe replies) < :mod:`~mbs.synth.goose.build` (bounds,
validation, assembly) < :mod:`~mbs.synth.goose.distractors` (teacher-free distractors) <
:mod:`~mbs.synth.goose.run` (the method: ``mbs-synthesize method=goose``).
"""
