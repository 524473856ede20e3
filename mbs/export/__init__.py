"""Building verl training data: sources, mixing, deduplication, decontamination, verl's schema.

* :mod:`mbs.export.sources` — problems from calibrate / synthesize / pipeline runs or any data config
* :mod:`mbs.export.dedup` — exact (normalised) and MinHash-LSH near-duplicate removal (datasketch)
* :mod:`mbs.export.decontam` — word n-gram overlap with the evaluation benchmarks (n = 13 default)
* :mod:`mbs.export.mix` — mixing ratios and the stable-hash train/validation split
* :mod:`mbs.export.assemble` — the mixed, split rows of an export, its per-source summary and prompt lengths
* :mod:`mbs.export.verl_schema` — verl's RL parquet columns, writer and reader check

The stage that chains them is :mod:`mbs.stages.export` (``mbs-export``).
"""
