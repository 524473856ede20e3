"""Credentials out of every URL mbs writes or logs.

A ``backend.base_url`` may carry a secret: ``http://user:key@host/v1`` or
``https://host/v1?api-key=...`` (often through ``${oc.env:...}``, so ``config.yaml`` keeps it
unresolved, but the resolved URL reaches the backend). :func:`redact_url` replaces the user
info and every query value with ``***``; :func:`redact_text` does so for every URL inside a
text; :func:`redact_obj` for every string of a JSON-like object (manifests, summaries,
configs). :func:`install_log_redaction` makes every log record of the process (httpx's
``HTTP Request: POST http://user:key@...`` lines and openai's debug lines included) pass
through :func:`redact_text`.

>>> redact_url("http://user:sk-123@host:8000/v1?api-key=sk-9&x=1")
'http://***@host:8000/v1?api-key=***&x=***'
>>> redact_url("http://127.0.0.1:8000/v1")
'http://127.0.0.1:8000/v1'
"""

from __future__ import annotations

import logging
import re
import threading
from typing import Any

MASK = "***"

#: A URL: scheme, optional user info, host and the rest up to whitespace or a quote.
_URL = re.compile(r"(?P<scheme>\b[a-zA-Z][a-zA-Z0-9+.\-]*://)(?P<userinfo>[^\s/@\"'<>]+@)?(?P<rest>[^\s\"'<>]*)")
_QUERY_VALUE = re.compile(r"(?P<sep>[?&;])(?P<name>[^=&;#\s]+)=(?P<value>[^&;#\s]*)")


def _redact_match(m: re.Match) -> str:
    rest = m.group("rest")
    if "?" in rest:
        path, query = rest.split("?", 1)
        rest = path + _QUERY_VALUE.sub(lambda q: f"{q.group('sep')}{q.group('name')}={MASK}", "?" + query)
    return m.group("scheme") + (f"{MASK}@" if m.group("userinfo") else "") + rest


def redact_url(url: str) -> str:
    """``url`` with its user info (``user:password@``) and query values replaced by ``***``."""
    return _URL.sub(_redact_match, str(url))


def redact_text(text: str) -> str:
    """``text`` with every URL in it redacted (see :func:`redact_url`)."""
    if "://" not in text:
        return text
    return _URL.sub(_redact_match, text)


def redact_obj(obj: Any) -> Any:
    """A copy of a JSON-like object (dicts, lists, strings) with every URL in a string redacted."""
    if isinstance(obj, str):
        return redact_text(obj)
    if isinstance(obj, dict):
        return {k: redact_obj(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [redact_obj(v) for v in obj]
    return obj


_installed = False
_install_lock = threading.Lock()


def install_log_redaction() -> None:
    """Redact URLs in every log record created from now on, in this process (idempotent).

    Wraps the log record factory, so records of every logger (``httpx``, ``openai``, ``mbs``)
    are redacted whatever handler (Hydra's file log, the console, pytest's capture) writes them.
    """
    global _installed
    with _install_lock:
        if _installed:
            return
        previous = logging.getLogRecordFactory()

        def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
            record = previous(*args, **kwargs)
            try:
                text = record.getMessage()
            except Exception:  # noqa: BLE001 - a bad format string is logging's problem to report
                return record
            clean = redact_text(text)
            if clean != text:
                record.msg, record.args = clean, ()
            return record

        logging.setLogRecordFactory(factory)
        _installed = True
