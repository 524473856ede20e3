"""Document grounding: corpus loading, TF-IDF retrieval, "not yet used" assignment, clear errors."""

from __future__ import annotations

import json

import pytest
from omegaconf import OmegaConf

from mbs.synth.grounding import Document, Retriever, assign_documents, documents_block, load_corpus

DOCS = [
    Document("bonds", "A bond pays a fixed coupon every year until maturity; the coupon rate is set at issue."),
    Document("stocks", "A stock dividend is a share of profit paid to stockholders, usually every quarter."),
    Document("loans", "A loan accrues interest on the outstanding principal; compound interest grows the debt."),
    Document("weather", "Rain is likely tomorrow in the north, with sunshine in the south."),
]


def test_tfidf_ranks_by_similarity():
    r = Retriever(DOCS)
    s = r.scores("What coupon does the bond pay each year?")
    assert s.shape == (4,)
    assert max(range(4), key=lambda i: s[i]) == 0 and s[3] == 0.0
    assert r.scores("compound interest on a loan").argmax() == 2


def test_assign_never_reuses_a_document():
    r = Retriever(DOCS)
    got = r.assign([("s1", "bond coupon"), ("s2", "bond coupon maturity"), ("s3", "interest")], k=2)
    ids = {k: [d.id for d in v] for k, v in got.items()}
    assert ids["s1"][0] == "bonds" and "bonds" not in ids["s2"]
    used = [d for v in ids.values() for d in v]
    assert len(used) == len(set(used)) == 4  # no document twice; the corpus ran out before s3
    assert len(ids["s1"]) == len(ids["s2"]) == 2 and ids["s3"] == []
    assert r.assign([("s1", "bond coupon")], k=2) == {"s1": got["s1"]}  # deterministic


def test_load_corpus_jsonl_and_folder(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps({"id": "a", "body": "alpha"}) + "\n\n" + json.dumps({"body": "beta"}) + "\n")
    assert load_corpus(path, "body", "id") == [Document("a", "alpha"), Document("3", "beta")]
    folder = tmp_path / "docs"
    (folder / "sub").mkdir(parents=True)
    (folder / "x.txt").write_text("one")
    (folder / "sub" / "y.md").write_text("two")
    (folder / "skip.pdf").write_text("no")
    assert load_corpus(folder) == [Document("sub/y.md", "two"), Document("x.txt", "one")]


def test_errors_name_the_input(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps({"id": "a"}) + "\n")
    with pytest.raises(ValueError, match=r"c.jsonl line 1: field 'text' missing"):
        load_corpus(path)
    path.write_text(json.dumps({"id": "a", "text": "x"}) + "\n" + json.dumps({"id": "a", "text": "y"}) + "\n")
    with pytest.raises(ValueError, match="document id 'a' occurs twice"):
        load_corpus(path)
    with pytest.raises(FileNotFoundError, match="no such file"):
        load_corpus(tmp_path / "missing.jsonl")
    with pytest.raises(ValueError, match="valid values are tfidf, embedding"):
        Retriever(DOCS, "bm25")
    with pytest.raises(FileNotFoundError, match="local sentence-transformers model folder"):
        Retriever(DOCS, "embedding", str(tmp_path / "no-model"))
    gcfg = OmegaConf.create({"corpus": None, "text_field": "text", "id_field": "id", "retriever": "tfidf", "embedding_model": None, "top_k": 2})
    with pytest.raises(ValueError, match="needs mbs.grounding.corpus"):
        assign_documents(gcfg, [])


def test_documents_block_cuts_long_texts():
    block = documents_block([Document("d", "x" * 50)], max_chars=20)
    assert block == "[1] (d)\n" + "x" * 15 + " [...]"
