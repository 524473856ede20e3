"""Document grounding of synthetic trees (seed paper, Stage 3, for domains such as finance).

For each seed, the top-K_d documents *not yet used* by an earlier seed are retrieved from a
corpus by similarity to the seed problem, and every synthetic problem of the seed's tree is
rewritten by the teacher on them (``mbs_ground_v1``).

Retrieval runs on the CPU with scikit-learn by default (``retriever: tfidf``: TF-IDF vectors
with sublinear term frequency and English stop words removed, cosine similarity). ``retriever: embedding`` encodes with a
sentence-transformers model loaded from a local folder (``embedding_model``); the package
``sentence-transformers`` is then needed and nothing is downloaded.

Documents are assigned to seeds in seed order before any seed is grown, so the assignment is
the same whatever order seeds finish in, and on a resumed run.

Corpus formats: a JSONL file (one document per line, text in ``text_field``, id in
``id_field``, or the line number when that is ``null``) or a folder whose ``*.txt`` and
``*.md`` files are the documents (the file path relative to the folder is the id).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mbs.io import iter_jsonl
from mbs.synth.settings import Grounding

log = logging.getLogger(__name__)


@dataclass
class Document:
    """One corpus document: its id and text."""

    id: str
    text: str


def load_corpus(path: str | Path, text_field: str = "text", id_field: str | None = "id") -> list[Document]:
    """Read a corpus (JSONL file or folder of ``.txt``/``.md`` files).

    Raises:
        FileNotFoundError: The path does not exist, or a folder has no ``.txt``/``.md`` file.
        ValueError: A JSONL line is not an object, lacks ``text_field`` (names file and line),
            or two documents share an id.
    """
    path = Path(path).expanduser()
    docs: list[Document] = []
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.suffix in (".txt", ".md") and p.is_file())
        if not files:
            raise FileNotFoundError(f"grounding corpus {path}: no .txt or .md files")
        docs = [Document(str(p.relative_to(path)), p.read_text(encoding="utf-8")) for p in files]
    elif path.is_file():
        for lineno, obj in iter_jsonl(path):
            if not isinstance(obj, dict) or not isinstance(obj.get(text_field), str):
                raise ValueError(f"{path} line {lineno}: field {text_field!r} missing or not a string")
            doc_id = str(obj[id_field]) if id_field and obj.get(id_field) is not None else str(lineno)
            docs.append(Document(doc_id, obj[text_field]))
    else:
        raise FileNotFoundError(f"grounding corpus {path}: no such file or folder")
    ids = [d.id for d in docs]
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise ValueError(f"grounding corpus {path}: document id {dup!r} occurs twice")
    return docs


class Retriever:
    """Ranks corpus documents by similarity to a query (TF-IDF or a local sentence-embedding model).

    Args:
        docs: The corpus.
        kind: ``tfidf`` or ``embedding``.
        embedding_model: Local sentence-transformers model folder (``kind="embedding"``).

    Raises:
        ValueError: Unknown kind, or an empty corpus.
        FileNotFoundError: ``embedding_model`` is not a local folder.
        ImportError: ``kind="embedding"`` without the ``sentence-transformers`` package.
    """

    def __init__(self, docs: Sequence[Document], kind: str = "tfidf", embedding_model: str | None = None):
        if not docs:
            raise ValueError("grounding corpus is empty")
        self.docs = list(docs)
        self.kind = kind
        texts = [d.text for d in self.docs]
        if kind == "tfidf":
            # lazy: heavy import, only grounding needs it
            from sklearn.feature_extraction.text import TfidfVectorizer

            self._vec = TfidfVectorizer(sublinear_tf=True, strip_accents="unicode", stop_words="english")
            self._matrix = self._vec.fit_transform(texts)
        elif kind == "embedding":
            if not embedding_model or not Path(embedding_model).expanduser().is_dir():
                raise FileNotFoundError(
                    f"mbs.grounding.embedding_model={embedding_model!r}: retriever=embedding needs a local "
                    "sentence-transformers model folder (nothing is downloaded)"
                )
            try:
                from sentence_transformers import SentenceTransformer  # lazy: an optional extra
            except ImportError as err:
                raise ImportError("retriever=embedding needs the package sentence-transformers") from err
            self._model = SentenceTransformer(str(Path(embedding_model).expanduser()), device="cpu")
            self._matrix = self._model.encode(texts, normalize_embeddings=True)
        else:
            raise ValueError(f"mbs.grounding.retriever={kind!r}: valid values are tfidf, embedding")

    def scores(self, query: str) -> np.ndarray:
        """Cosine similarity of ``query`` to every document, shape ``(n_docs,)``."""
        if self.kind == "tfidf":
            from sklearn.metrics.pairwise import linear_kernel  # lazy: heavy import, only grounding needs it

            return linear_kernel(self._vec.transform([query]), self._matrix).ravel()
        q = self._model.encode([query], normalize_embeddings=True)
        return (self._matrix @ q[0]).ravel()

    def assign(self, queries: Sequence[tuple[str, str]], k: int) -> dict[str, list[Document]]:
        """Top-``k`` documents not yet used for each ``(key, query)``, in the given order.

        Ties are broken by corpus order, so the assignment is deterministic.

        Returns:
            ``{key: documents}`` (fewer than ``k`` once the corpus runs out).
        """
        used: set[int] = set()
        out: dict[str, list[Document]] = {}
        for key, query in queries:
            s = self.scores(query)
            order = sorted(range(len(self.docs)), key=lambda i: (-float(s[i]), i))
            pick = [i for i in order if i not in used][:k]
            used.update(pick)
            out[key] = [self.docs[i] for i in pick]
        return out


def assign_documents(grounding: Grounding, seeds: Sequence[Any]) -> dict[str, list[Document]]:
    """Documents of every seed (by seed id) under the ``mbs.grounding`` settings, in seed order.

    Raises:
        ValueError: Grounding is enabled without a corpus. See also :func:`load_corpus`.
    """
    if not grounding.corpus:
        raise ValueError("mbs.grounding.enabled=true needs mbs.grounding.corpus=<JSONL file or folder>")
    docs = load_corpus(grounding.corpus, grounding.text_field, grounding.id_field)
    retriever = Retriever(docs, grounding.retriever, grounding.embedding_model)
    log.info("grounding: %d documents, %s retrieval, top %d per seed", len(docs), grounding.retriever, grounding.top_k)
    return retriever.assign([(s.id, s.prompt) for s in seeds], int(grounding.top_k))


def documents_block(docs: Sequence[Document], max_chars: int) -> str:
    """The documents as a numbered block for the grounding prompt, each cut to ``max_chars``."""
    parts = []
    for i, d in enumerate(docs, 1):
        text = d.text if len(d.text) <= max_chars else d.text[: max_chars - 5].rstrip() + " [...]"
        parts.append(f"[{i}] ({d.id})\n{text}")
    return "\n\n".join(parts)
