"""The manual (docs/, built with MkDocs) and the front page (README.md).

The strict build fails on a broken link, a missing anchor or a page left out of ``nav``
(``mkdocs.yml``: ``strict: true`` and its ``validation`` settings); these tests run it, check
that the mechanism really fails on each of those on a copy, that every page of docs/ is
reachable from README.md by links, and that the front page stays short.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
#: The front page's length limit (issue 45: a newcomer reads it in five minutes).
README_MAX_LINES = 250
#: A Markdown link or image target: ``[text](target)``, ``![alt](target)``.
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def _mkdocs_build(root: Path, site: Path) -> subprocess.CompletedProcess:
    """``python -m mkdocs build --strict`` in ``root`` into ``site`` (no network needed)."""
    if importlib.util.find_spec("mkdocs") is None:
        pytest.fail("mkdocs is not installed: pip install -e '.[dev]' (the dev extra brings it)")
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
                          check=False, cwd=root, capture_output=True, text=True, timeout=300)


def _copy(tmp_path: Path) -> Path:
    """A copy of mkdocs.yml and docs/ to break on purpose."""
    root = tmp_path / "repo"
    shutil.copytree(ROOT / "docs", root / "docs")
    shutil.copy(ROOT / "mkdocs.yml", root / "mkdocs.yml")
    return root


def test_docs_build_strict(tmp_path):
    done = _mkdocs_build(ROOT, tmp_path / "site")
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stdout}\n{done.stderr}"
    assert (tmp_path / "site" / "index.html").is_file()


def _append(path: Path, text: str) -> None:
    path.write_text(path.read_text(encoding="utf-8") + text, encoding="utf-8")


@pytest.mark.parametrize("page, text, expect", [
    ("index.md", "\n[gone](no_such_page.md)\n", "no_such_page.md"),
    ("index.md", "\n[gone](calibrate.md#no-such-anchor)\n", "no-such-anchor"),
    ("orphan.md", "# Not in nav\n", "orphan.md"),
], ids=["broken link", "missing anchor", "page not in nav"])
def test_docs_build_fails_when_broken(tmp_path, page, text, expect):
    root = _copy(tmp_path)
    target = root / "docs" / page
    if target.exists():
        _append(target, text)
    else:
        target.write_text(text, encoding="utf-8")
    done = _mkdocs_build(root, tmp_path / "site")
    assert done.returncode != 0, f"the strict build passed a broken manual:\n{done.stderr}"
    assert expect in done.stdout + done.stderr


def _local_links(page: Path) -> list[Path]:
    """The local files ``page`` links to (web links and pure anchors left out; anchors stripped)."""
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.DOTALL)  # not links inside code blocks
    out = []
    for target in LINK.findall(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue
        out.append((page.parent / target.split("#", 1)[0]).resolve())
    return out


def test_every_docs_page_is_reachable_from_readme():
    seen, todo = {README.resolve()}, [README.resolve()]
    while todo:
        page = todo.pop()
        for target in _local_links(page):
            assert target.exists(), f"{page.relative_to(ROOT)} links to {target}, which does not exist"
            if target.suffix == ".md" and target not in seen:
                seen.add(target)
                todo.append(target)
    pages = {p.resolve() for p in (ROOT / "docs").rglob("*.md")}
    missing = sorted(str(p.relative_to(ROOT)) for p in pages - seen)
    assert not missing, f"pages of docs/ no link from README.md leads to: {missing}"


def test_readme_is_a_front_page():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines (at most {README_MAX_LINES}): move detail to docs/"
    text = "\n".join(lines)
    for marker in ("<!-- main-command -->", "<!-- test-command -->"):  # .ci/run reads the block after the marker
        assert re.search(re.escape(marker) + r"\n```bash\n.+\n```", text), f"README.md: no bash block after {marker}"
