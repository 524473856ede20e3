"""The command line around a stage (issue 30): a refused start leaves every file of an existing
run directory as it was (Hydra's own included), no secret reaches a file or the terminal
through an override (issue 46: a credentialed URL, in a run or a ``-m`` sweep, is refused, and
redaction matches Hydra's escaped forms), each error is printed once, and a resume at a new
server address reuses the cache."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from support.fault_server import FaultServer

from mbs.launch import DeferredFileHandler, redact_file
from mbs.redact import redact_text, secret_override
from mbs.stages.config import hydra_files

REPO = Path(__file__).resolve().parents[1]
TESTS = REPO / "tests"
SECRET = "sk-t0ps3cr3tvalue0123456789"
HOLD = ("import sys, time; from pathlib import Path; from mbs.io import RunLock; "
        "held = RunLock.acquire(Path(sys.argv[1])); print('ready', flush=True); time.sleep(120)")


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(TESTS), os.environ.get("PYTHONPATH", "")])}


def _calibrate(run_dir: Path, data: Path, *more: str, backend: tuple[str, ...] | None = None,
               env: dict[str, str] | None = None, multirun: bool = False):
    backend = backend or (
        "~backend", "+backend._target_=support.fakes.FakeBackend", "+backend.label=fake", "+backend.rates={EASY: 1.0}",
    )
    cmd = [
        sys.executable, "-c", "from mbs.cli import calibrate; calibrate()", *(["-m"] if multirun else []),
        "data=jsonl", f"data.path={data}", "data.origin=toy", "calibrate.n=2", "calibrate.budgets=[16]",
        "calibrate.figures=false", *backend, "verifier.workers=1",
        f"hydra.run.dir={run_dir}", f"paths.root={run_dir.parent}", f"paths.cache_dir={run_dir.parent / 'cache'}", *more,
    ]
    return subprocess.run(cmd, check=False, capture_output=True, text=True, env={**_env(), **(env or {})}, timeout=300)


def snapshot(run_dir: Path) -> dict[str, bytes]:
    """Every file under ``run_dir`` (hidden ones included) and its bytes."""
    return {str(p.relative_to(run_dir)): p.read_bytes() for p in sorted(run_dir.rglob("*")) if p.is_file()}


def test_refused_starts_leave_the_finished_run_directory_as_it_was(tmp_path, toy_jsonl):
    run = tmp_path / "run"
    done = _calibrate(run, toy_jsonl)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    before = snapshot(run)
    assert {"manifest.json", ".hydra/config.yaml", ".hydra/overrides.yaml", "calibrate.log"} <= set(before)

    # another sampling config: refused, the manifest stays (mbs-merge still takes the directory)
    res = _calibrate(run, toy_jsonl, "seed=7")
    out = res.stdout + res.stderr
    assert res.returncode == 2 and "seed: 0 -> 7" in out
    assert out.count("holds records drawn under another sampling config") == 1, out  # printed once
    assert snapshot(run) == before

    # several bad values: all named, each once, nothing written
    res = _calibrate(run, toy_jsonl, "calibrate.n=0", "calibrate.temperature=-1")
    out = res.stdout + res.stderr
    assert res.returncode == 2 and "2 config errors" in out
    assert out.count("calibrate.n=0: must be") == 1 and out.count("calibrate.temperature=-1: must be") == 1, out
    assert snapshot(run) == before

    # a key the backend does not take: refused by validation before anything is written
    res = _calibrate(run, toy_jsonl, "+backend.temprature=0.5")
    assert res.returncode == 2 and "backend.temprature: not a setting of support.fakes.FakeBackend" in res.stderr
    assert "TypeError" not in res.stdout + res.stderr and snapshot(run) == before

    # secrets as overrides, with or without '+': refused before Hydra reads them, never echoed
    for override in (f"+backend.api_key={SECRET}", f"backend.api_key={SECRET}", f"backend.model={SECRET}",
                     f"hydra.job.env_set.OPENAI_API_KEY={SECRET}"):
        res = _calibrate(run, toy_jsonl, override)
        out = res.stdout + res.stderr
        assert res.returncode == 2 and "refusing a secret on the command line" in out, out[-2000:]
        assert SECRET not in out and "Traceback" not in out
        assert snapshot(run) == before

    # the same config resumes: admitted, Hydra's files and the log are its own again
    res = _calibrate(run, toy_jsonl, "verifier.workers=1")
    assert res.returncode == 0, res.stderr[-3000:]
    after = snapshot(run)
    assert "manifest.json" in after
    assert after["calibrate.log"].startswith(before["calibrate.log"]) and len(after["calibrate.log"]) > len(before["calibrate.log"])
    for path, data in after.items():
        assert SECRET.encode() not in data, path


def test_a_start_failing_after_admission_leaves_the_finished_run_as_it_was(tmp_path, toy_jsonl):
    run = tmp_path / "run"
    done = _calibrate(run, toy_jsonl)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    before = snapshot(run)

    # admitted (same sampling config), then the data fails to load: nothing of its own written
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "x", "problem": "p"}\n')
    res = _calibrate(run, bad)
    assert res.returncode == 2 and "missing field 'answer'" in res.stderr, res.stderr[-3000:]
    assert snapshot(run) == before  # manifest, config.yaml, .hydra/, log and lock line as they were

    # a start that wrote records before failing is unfinished: its manifest stays gone, its records stay
    more = tmp_path / "more.jsonl"  # 8 new problems: two batches of 4 requests, the second one fails
    more.write_text(toy_jsonl.read_text() + "".join(f'{{"id": "new{k}", "problem": "EASY: {k}+1?", "answer": "{k + 1}"}}\n'
                                                    for k in range(8)))
    res = _calibrate(run, more, "+backend.fail_after=9")
    assert res.returncode == 2 and "fake backend: killed" in res.stderr, res.stderr[-3000:]
    after = snapshot(run)
    assert "manifest.json" not in after and after["calibrate.log"].startswith(before["calibrate.log"])
    grown = [p for p in after if p.startswith("rollouts.") and len(after[p]) > len(before.get(p, b""))]
    assert grown, sorted(after)


def test_a_run_refused_by_the_lock_writes_nothing_into_the_running_run(tmp_path, toy_jsonl):
    run = tmp_path / "run"
    done = _calibrate(run, toy_jsonl)
    assert done.returncode == 0, done.stderr[-3000:]
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(run)], stdout=subprocess.PIPE, text=True, env=_env())
    try:
        assert holder.stdout.readline().strip() == "ready"
        held = snapshot(run)
        res = _calibrate(run, toy_jsonl, "seed=7")
        out = res.stdout + res.stderr
        assert res.returncode == 2 and "is in use by another run" in out and out.count("is in use by another run") == 1
        assert snapshot(run) == held  # .hydra/config.yaml still says seed 0; no line of it in the log
        assert b"seed: 7" not in held[".hydra/config.yaml"]
    finally:
        holder.kill()
        holder.wait(timeout=30)


def test_resume_at_a_new_server_address_makes_no_request(tmp_path, toy_jsonl):
    """The same model behind another host or port (a requeue, a proxy, a new server) is the same
    model: the run is admitted and every sample comes from the cache. A credentialed URL given
    through the environment (the route the command line points to) reaches no file."""
    run = tmp_path / "run"
    openai = ("backend=openai", "backend.model=m", "backend.max_retries=0", "backend.api_key_env=null")
    with FaultServer([]) as first, FaultServer([]) as second:
        password = "pw-hunter2-5678"  # not credential-shaped: the URL is taken, and redacted
        url = f"http://user:{password}@127.0.0.1:{first.port}/v1?api-key={password}"
        env = {"MBS_TEST_BASE_URL": url}
        done = _calibrate(run, toy_jsonl, "backend.base_url=${oc.env:MBS_TEST_BASE_URL}", backend=openai, env=env)
        assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
        assert first.hits and password not in done.stdout + done.stderr
        written = snapshot(run)
        assert ".hydra/overrides.yaml" in written and ".hydra/hydra.yaml" in written
        for path, data in written.items():
            assert password.encode() not in data, path
        res = _calibrate(run, toy_jsonl, f"backend.base_url={second.base_url}", backend=openai)
        assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
        assert second.hits == []  # zero new requests
    assert (run / "manifest.json").is_file()


PASSWORD = "pw-hunter2-5678"


@pytest.mark.parametrize(
    "override",
    [
        f"backend.base_url=http://user:{PASSWORD}@127.0.0.1:9/v1",
        f"backend.base_url='http://user:{PASSWORD}@127.0.0.1:9/v1'",
        f"backend.base_url=http\\://user\\:{PASSWORD}@127.0.0.1\\:9/v1",  # as Hydra escapes it
        f"backend.base_url=http://127.0.0.1:9/v1,http://u:{PASSWORD}@127.0.0.1:9/v1",  # one value of a sweep
        f"backend.base_url=https://127.0.0.1:9/v1?api-key={PASSWORD}",
    ],
)
def test_a_credentialed_url_is_refused_in_runs_and_sweeps(tmp_path, toy_jsonl, override):
    """Issue 46: a URL with a credential on the command line (single run or ``-m`` sweep) is refused
    before Hydra reads it (it would reach multirun.yaml, every job's .hydra/ and the launcher's
    lines), naming the key and the environment-variable route, never the value."""
    sweep = tmp_path / "sweep"
    openai = ("backend=openai", "backend.model=m", "backend.max_retries=0", "backend.api_key_env=null")
    for mode in ((), ("calibrate.n=1,2", f"hydra.sweep.dir={sweep}")):
        res = _calibrate(tmp_path / "run", toy_jsonl, *mode, override, backend=openai, multirun=bool(mode))
        out = res.stdout + res.stderr
        assert res.returncode == 2, out[-2000:]
        assert "backend.base_url: refusing a secret on the command line" in out and "${oc.env:" in out, out
        assert PASSWORD not in out and "Traceback" not in out
        assert not (tmp_path / "run").exists() and not sweep.exists()


def test_a_sweep_through_the_environment_writes_no_credential(tmp_path, toy_jsonl):
    """The environment-variable route in a ``-m`` sweep: multirun.yaml and every job's files and
    log keep ``${oc.env:...}``; no job prints the password."""
    sweep = tmp_path / "sweep"
    openai = ("backend=openai", "backend.model=m", "backend.max_retries=0", "backend.api_key_env=null")
    with FaultServer([]) as server:
        url = f"http://user:{PASSWORD}@127.0.0.1:{server.port}/v1"
        res = _calibrate(tmp_path / "unused", toy_jsonl, "backend.base_url=${oc.env:MBS_TEST_BASE_URL}", "calibrate.n=1,2",
                         f"hydra.sweep.dir={sweep}", backend=openai, env={"MBS_TEST_BASE_URL": url}, multirun=True)
        assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
        assert server.hits and PASSWORD not in res.stdout + res.stderr
    written = snapshot(sweep)
    assert "multirun.yaml" in written and {"0/manifest.json", "1/manifest.json", "1/.hydra/overrides.yaml"} <= set(written)
    for path, data in written.items():
        assert PASSWORD.encode() not in data, path


def test_redaction_matches_what_hydra_writes(tmp_path):
    """Hydra escapes an override's value (``http\\://user\\:pw@host``, ``\\=``) in overrides.yaml,
    hydra.yaml, multirun.yaml and its launcher's lines: every form is redacted."""
    escaped = f"backend.base_url=http\\://user\\:{PASSWORD}@host\\:8000/v1?api-key\\={PASSWORD}&x\\=1"
    for text in (escaped, escaped.replace("\\", "\\\\"), f"\t#0 : {escaped} calibrate.n=1"):
        clean = redact_text(text)
        assert PASSWORD not in clean and "***@host" in clean, clean
    assert redact_text("http\\://127.0.0.1\\:8000/v1") == "http\\://127.0.0.1\\:8000/v1"
    # the files the stage writes from Hydra's node (.hydra/hydra.yaml, overrides.yaml)
    node = OmegaConf.create({"overrides": {"task": [escaped, "calibrate.n=1"]}, "job": {"override_dirname": escaped}})
    files = hydra_files(OmegaConf.create({"backend": {"base_url": escaped.split("=", 1)[1]}}), node)
    assert set(files) == {"config.yaml", "hydra.yaml", "overrides.yaml"}
    for name, text in files.items():
        assert PASSWORD not in text, name
    # multirun.yaml, which Hydra's sweeper writes before the jobs: each job redacts it
    multirun = tmp_path / "multirun.yaml"
    multirun.write_text(OmegaConf.to_yaml(OmegaConf.create({"backend": {"base_url": f"http://u:{PASSWORD}@h/v1"},
                                                            "hydra": {"overrides": {"task": [escaped]}}})))
    assert redact_file(multirun) and PASSWORD not in multirun.read_text()
    assert not redact_file(multirun) and not redact_file(tmp_path / "missing.yaml")


@pytest.mark.parametrize(
    ("arg", "secret"),
    [
        ("+backend.api_key=abc", "backend.api_key"),
        ("~backend.api_key", None),
        ("backend.api_key_env=MY_KEY", None),
        ("train.hf_token=abc", "train.hf_token"),
        ("++db.password=x", "db.password"),
        ("backend.max_tokens_param=max_completion_tokens", None),
        ("calibrate.budgets=[64,128]", None),
        (f"backend.extra_body={{auth: 'Bearer {SECRET}'}}", "backend.extra_body"),
        ("backend.base_url=http://u:p@host/v1", "backend.base_url"),  # refused: the environment route instead
        ("backend.base_url=http\\://u\\:p@host/v1", "backend.base_url"),  # Hydra's escaped form
        ("backend.base_url=http://127.0.0.1:8000/v1,http://u@h/v1", "backend.base_url"),  # a sweep value
        ("backend.base_url=https://h/v1?api-key=abc", "backend.base_url"),
        ("backend.base_url=http://127.0.0.1:8000/v1?x=1", None),
        ("backend.base_url=${oc.env:MY_BASE_URL}", None),
        ("+backend.extra_body={api_key:PW}", "backend.extra_body.api_key"),  # a secret-named key inside a dict value
        ("+backend.default_headers={Accept: json, 'Authorization': PW}", "backend.default_headers.Authorization"),
        ("+backend.extra_body={chat_template_kwargs: {enable_thinking: false}, top_k: 5}", None),
        ("--cfg", None),
    ],
)
def test_secret_override(arg, secret):
    assert secret_override(arg) == secret


def test_credentials_outside_urls_are_masked_in_logs():
    assert SECRET not in redact_text(f"sending {SECRET} to the server")
    assert redact_text("calibrate.max_tokens=64 task-1") == "calibrate.max_tokens=64 task-1"


def test_deferred_log_is_written_on_commit_and_never_after_discard(tmp_path):
    def handler(name):
        h = DeferredFileHandler(str(tmp_path / name))
        h.setFormatter(logging.Formatter("%(message)s"))
        return h

    def record(msg):
        return logging.LogRecord("mbs", logging.INFO, __file__, 1, msg, (), None)

    kept, dropped = handler("kept.log"), handler("dropped.log")
    for h in (kept, dropped):
        h.handle(record("before admission"))
    assert not (tmp_path / "kept.log").exists()
    kept.commit()
    kept.handle(record("after"))
    dropped.discard()
    dropped.handle(record("after"))
    kept.close()
    dropped.close()
    assert (tmp_path / "kept.log").read_text() == "before admission\nafter\n"
    assert not (tmp_path / "dropped.log").exists()
