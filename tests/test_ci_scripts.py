"""The CI helper that keeps the side environments (.venv-verl, .venv-vllm) between CI runs
(``.ci/venv_cache.sh``): a clean checkout links its environment to the cache of the same script,
a changed script gets a new cache and the old one is removed, and nothing changes without the cache."""

from __future__ import annotations

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _cached_venv(cwd: Path, cache: str | None, script: Path, venv: str = ".venv-x") -> str:
    env = f"export MBS_CI_VENV_CACHE={cache}; " if cache is not None else "unset MBS_CI_VENV_CACHE; "
    out = subprocess.run(["bash", "-c", f'set -euo pipefail; {env}. "{REPO}/.ci/venv_cache.sh"; cached_venv venv-x "{script}" {venv}'],
                         cwd=cwd, capture_output=True, text=True, check=True)
    return out.stdout + out.stderr


def test_a_clean_checkout_links_the_cache_of_its_script(tmp_path):
    cache, script = tmp_path / "cache", tmp_path / "env.sh"
    script.write_text("echo v1\n")
    one, two = tmp_path / "checkout1", tmp_path / "checkout2"
    one.mkdir(), two.mkdir()
    assert "->" in _cached_venv(one, str(cache), script)
    target = (one / ".venv-x").resolve()
    assert (one / ".venv-x").is_symlink() and target.parent == cache.resolve() and target.name.startswith("venv-x-")
    (target / "marker").write_text("built")  # what the env script built there
    _cached_venv(two, str(cache), script)  # the next clean checkout finds the same environment
    assert (two / ".venv-x" / "marker").read_text() == "built"
    _cached_venv(two, str(cache), script)  # already there: left as it is
    assert (two / ".venv-x").resolve() == target
    script.write_text("echo v2\n")  # a changed script: a new, empty cache; the old one is removed
    three = tmp_path / "checkout3"
    three.mkdir()
    _cached_venv(three, str(cache), script)
    assert (three / ".venv-x").resolve() != target and not target.exists()
    assert [p.name for p in cache.iterdir()] == [(three / ".venv-x").resolve().name]


def test_without_a_cache_or_a_writable_one_nothing_is_linked(tmp_path):
    script = tmp_path / "env.sh"
    script.write_text("echo v1\n")
    _cached_venv(tmp_path, None, script)
    assert not (tmp_path / ".venv-x").exists()
    _cached_venv(tmp_path, "", script)
    assert not (tmp_path / ".venv-x").exists()
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    assert "cannot write" in _cached_venv(tmp_path, str(blocked / "cache"), script)
    assert not (tmp_path / ".venv-x").exists()
