"""What the command line does around a stage: no secret on the command line, and nothing of
a run in a run directory until the run is admitted there.

Used by the entry points of ``mbs/cli.py`` (``mbs-calibrate ...``); the stages themselves know
nothing of it.

* :func:`refuse_secrets` ends a command whose overrides carry a secret (``+backend.api_key=...``,
  a ``sk-...`` value, a URL with a credential, in a single run or any value of a ``-m`` sweep;
  :func:`mbs.redact.secret_override`) with exit status 2 before Hydra reads them, naming the key
  but never the value: Hydra would echo it in its own error message and write it into
  ``multirun.yaml`` and ``.hydra/``. Keys are read from the environment variable ``api_key_env``
  names, a credentialed URL from ``${oc.env:VAR}``. What a multirun's ``multirun.yaml`` holds
  anyway (a URL of a config file) is redacted by each of its jobs (:func:`redact_file`).
* :func:`staged_outputs` keeps Hydra's files (rendered at the stage boundary:
  :func:`mbs.stages.config.staged_hydra_outputs`) out of the run directory until a
  :class:`mbs.io.RunDir` there admits the run (lock taken, sampling config accepted;
  :func:`mbs.io.on_admit`), so a refused start (a run directory in use, another sampling
  config, a bad config value) leaves an existing run directory exactly as it was. Hydra writes
  no ``.hydra/`` itself (``hydra.output_subdir: null`` in ``conf/base.yaml``): it is written
  here on admission, every URL redacted (:mod:`mbs.redact`). The job log's file handler is a
  :class:`DeferredFileHandler` (``hydra.job_logging`` in ``conf/base.yaml``): the lines of a
  run before its admission are held and written on admission, or dropped when it is refused.
  A command that finishes without opening a run directory (``mbs-serve``) is admitted when it
  ends without an error. A start that fails after its admission but before writing anything of
  its own (a policy that does not resolve, a missing checkpoint, data that does not load) is put
  back too: manifest, config, ``.hydra/`` files and job log as they were
  (:func:`mbs.io.restore_on_failure`).
"""

from __future__ import annotations

import functools
import logging
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mbs.io import on_admit, restore_on_failure, write_text_atomic
from mbs.redact import credentialed_url, install_log_redaction, redact_text, secret_override

#: Folder of the run directory receiving Hydra's ``config.yaml``, ``hydra.yaml`` and ``overrides.yaml``.
HYDRA_SUBDIR = ".hydra"


def command_name() -> str:
    """The command's name as typed (``mbs-calibrate``), for error messages."""
    return Path(sys.argv[0]).name or "mbs"


def refuse_secrets(main: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a ``@hydra.main`` entry point: overrides carrying a secret end the command.

    Every override of the command line is checked, each value of a multirun sweep (``-m
    a=x,y``) included (:func:`mbs.redact.secret_override`): an API key, a credential-shaped
    value, or a URL with a credential (``http://user:password@host``, ``?api-key=...``), which
    Hydra would otherwise write into ``multirun.yaml`` and every job's ``.hydra/`` files (escaped
    as ``http\\://user\\:password@host``) and print in its launcher's lines. The message points
    to the environment-variable route: ``backend.api_key_env=VAR`` for a key,
    ``backend.base_url='${oc.env:VAR}'`` for a URL (saved files keep the reference, not the
    value). Log redaction (:func:`mbs.redact.install_log_redaction`) is installed before Hydra
    starts, so its own log lines (the launcher's ``#0 : overrides``) are redacted too.

    Raises:
        SystemExit: Status 2 when an override of ``sys.argv`` carries a secret; the message
            names each such key, never its value.
    """

    @functools.wraps(main)
    def entry(*args: Any, **kwargs: Any) -> Any:
        if not args and not kwargs:  # the console script: Hydra reads sys.argv
            install_log_redaction()
            found = [(key, credentialed_url(arg)) for arg in sys.argv[1:] if (key := secret_override(arg))]
            if found:
                routes = []
                if any(url for _, url in found):
                    routes.append("put a URL with a credential in an environment variable and name it, e.g. "
                                  "backend.base_url='${oc.env:MY_BASE_URL}' (saved files keep the reference, not the URL)")
                if not all(url for _, url in found):
                    routes.append("put an API key in an environment variable and name it with backend.api_key_env=VAR")
                print(
                    f"{command_name()}: error: {', '.join(dict.fromkeys(k for k, _ in found))}: refusing a secret on "
                    f"the command line (the value is not shown, and nothing was written); {'; '.join(routes)}",
                    file=sys.stderr,
                    flush=True,
                )
                raise SystemExit(2)
        return main(*args, **kwargs)

    return entry


class DeferredFileHandler(logging.FileHandler):
    """A log file written only once the run is admitted (see the module docstring).

    Until :meth:`commit`, records are formatted and held in memory (at most :attr:`MAX_HELD`
    lines); :meth:`commit` writes them and every later record to ``filename`` (appending);
    after :meth:`discard` the file is never opened and records are dropped. Takes the
    arguments of :class:`logging.FileHandler` (the file is always opened lazily).
    """

    MAX_HELD = 10_000

    def __init__(self, filename: str, mode: str = "a", encoding: str | None = None, delay: bool = True,
                 errors: str | None = None):
        super().__init__(filename, mode, encoding, delay=True, errors=errors)
        self._held: list[str] = []
        self._state = "held"  # held -> open (commit) or dropped (discard)

    def emit(self, record: logging.LogRecord) -> None:
        if self._state == "open":
            super().emit(record)
        elif self._state == "held" and len(self._held) < self.MAX_HELD:
            try:
                self._held.append(self.format(record))
            except Exception:  # noqa: BLE001 - logging reports its own formatting errors
                self.handleError(record)

    def commit(self) -> None:
        """Write the held lines and open the file for every later record."""
        self.acquire()  # the handler's lock (logging.Handler.acquire)
        try:
            if self._state == "open":
                return
            held, self._held, self._state = self._held, [], "open"
            if held:
                if self.stream is None:
                    self.stream = self._open()
                self.stream.write("".join(line + self.terminator for line in held))
                self.flush()
        finally:
            self.release()

    def discard(self) -> None:
        """Drop the held lines and every later record (a refused run leaves no line in the file;
        after :meth:`commit`, the file is closed and its later lines dropped: a failed start
        whose directory :func:`mbs.io.restore_on_failure` puts back)."""
        self.acquire()
        try:
            if self._state == "open" and self.stream is not None:
                self.stream.close()
                self.stream = None
            self._held, self._state = [], "dropped"
        finally:
            self.release()


def deferred_handlers() -> list[DeferredFileHandler]:
    """The :class:`DeferredFileHandler` instances of the root logger (Hydra's job log)."""
    return [h for h in logging.getLogger().handlers if isinstance(h, DeferredFileHandler)]


def log_to_files(logger: logging.Logger, level: int, msg: str, *args: Any) -> None:
    """Log a record to the root logger's file handlers only (an error the command prints on
    stderr itself, so that the terminal shows it once and the job log keeps it)."""
    record = logger.makeRecord(logger.name, level, "(mbs)", 0, msg, args, None)
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler) and record.levelno >= handler.level:
            handler.handle(record)


def redact_file(path: str | Path) -> bool:
    """Rewrite the text file ``path`` (atomically) with every URL and credential redacted
    (:func:`mbs.redact.redact_text`), when it holds any: Hydra's ``multirun.yaml``, which its
    sweeper writes before the jobs start.

    Returns:
        Whether the file was rewritten (``False``: missing, or nothing to redact).
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    clean = redact_text(text)
    if clean == text:
        return False
    write_text_atomic(path, clean)
    return True


def write_hydra_files(run_dir: Path, files: Mapping[str, str]) -> None:
    """Write Hydra's files into ``run_dir``'s :data:`HYDRA_SUBDIR`, each atomically, in order.

    Args:
        run_dir: The run directory.
        files: ``{file name: text}`` (``config.yaml``, ``hydra.yaml``, ``overrides.yaml``, as
            :func:`mbs.stages.config.hydra_files` renders them, every URL redacted).
    """
    folder = run_dir / HYDRA_SUBDIR
    for name, text in files.items():
        write_text_atomic(folder / name, text)


@contextmanager
def staged_outputs(output_dir: str | Path, hydra_files: Callable[[], Mapping[str, str]]) -> Iterator[None]:
    """Hold Hydra's files and job log back from the run directory until a run is admitted there.

    Args:
        output_dir: The Hydra run's output directory (``hydra.runtime.output_dir``).
        hydra_files: Renders Hydra's files (see :func:`write_hydra_files`); called once, on
            admission.
    """
    output = Path(output_dir).resolve()
    admitted = False

    def admit(path: Path) -> None:
        nonlocal admitted
        if admitted or path.resolve() != output:
            return
        admitted = True
        write_hydra_files(output, hydra_files())
        for handler in deferred_handlers():
            handler.commit()

    def job_logs() -> list[str]:
        for handler in deferred_handlers():
            handler.flush()
        return [h.baseFilename for h in deferred_handlers()]

    finished = False
    opened: list[Any] = []
    try:
        with on_admit(admit), restore_on_failure(job_logs) as opened:
            yield
            finished = True
    finally:  # after restore_on_failure has put back what it could
        if finished:
            admit(output)
        elif not admitted or (opened and all(run.restored for run in opened)):
            for handler in deferred_handlers():
                handler.discard()
