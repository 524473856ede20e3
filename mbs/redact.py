"""Credentials out of every URL mbs writes or logs.

A ``backend.base_url`` may carry a secret: ``http://user:key@host/v1`` or
``https://host/v1?api-key=...`` (often through ``${oc.env:...}``, so ``config.yaml`` keeps it
unresolved, but the resolved URL reaches the backend). :func:`redact_url` replaces the user
info and every query value with ``***``; :func:`redact_text` does so for every URL inside a
text; :func:`redact_obj` for every string of a JSON-like object (manifests, summaries,
configs). :func:`install_log_redaction` makes every log record of the process (httpx's
``HTTP Request: POST http://user:key@...`` lines and openai's debug lines included) pass
through :func:`redact_text`. A credential in a text outside a URL (an ``sk-...`` or ``hf_...``
key, a ``Bearer`` header) is masked as well.

:func:`secret_override` tells a command-line override that carries a secret (a key named like
``api_key``, ``token`` or ``password``, a value that looks like a credential, or a URL carrying
one: :func:`credentialed_url`): the command line refuses it, naming the key but never the value
(``mbs/launch.py``), and points to the environment-variable route. Every URL pattern here also
matches the escaped form Hydra writes an override in (``http\\://user\\:pw@host``), so what
reaches ``multirun.yaml``, ``.hydra/*`` or Hydra's log lines by another route is redacted too.

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

#: A URL: scheme, optional user info, host and the rest up to whitespace, a quote or the next
#: URL (a sweep's ``http://a/v1,http://u:pw@b/v1``). The ``://`` may be escaped as Hydra writes
#: an override's value into ``overrides.yaml``, ``hydra.yaml``, ``multirun.yaml`` and its
#: launcher's log lines (``http\://user\:pw@host``; the backslash doubled in a double-quoted
#: YAML string).
_SCHEME = r"[a-zA-Z][a-zA-Z0-9+.\-]*(?:\\{1,2})?://"
_URL = re.compile(
    rf"(?P<scheme>\b{_SCHEME})(?P<userinfo>[^\s/@\"'<>]+@)?(?P<rest>(?:(?!\b{_SCHEME})[^\s\"'<>])*)"
)
#: Hydra's escape of a special character in an override value (``\:``, ``\=``, ``\,``, ...).
_HYDRA_ESCAPE = re.compile(r"\\+(?=[\\()\[\]{}:=, \t])")
_QUERY_VALUE = re.compile(r"(?P<sep>[?&;])(?P<name>[^=&;#\s]+)=(?P<value>[^&;#\s]*)")
#: A config key holding a secret (its last dotted part); names of environment variables
#: (``api_key_env``) are not secrets.
_SECRET_NAME = re.compile(
    r"(?i)^(?:.*[_\-])?(?:api[_\-]?key|apikey|token|secret|password|passwd|credentials?|authorization|bearer)$"
)
#: A key inside a Hydra dict value (``{name: ...}``, ``{a: 1, 'name': ...}``), at any depth.
_DICT_KEY = re.compile(r"[{,]\s*['\"]?(?P<name>[A-Za-z_][\w\-]*)['\"]?\s*:")
#: A credential whatever its key: OpenAI-style ``sk-``, Hugging Face ``hf_``, GitHub, Slack and
#: AWS access keys, an ``Authorization: Bearer`` value.
_SECRET_VALUE = re.compile(
    r"\bsk-[A-Za-z0-9_\-]{16,}|\bhf_[A-Za-z0-9]{20,}|\bgh[pousr]_[A-Za-z0-9]{20,}|\bgithub_pat_\w{20,}"
    r"|\bxox[abprs]-[A-Za-z0-9\-]{10,}|\bAKIA[0-9A-Z]{16}\b|(?i:\bbearer)\s+[A-Za-z0-9._~+/\-]{8,}=*"
)


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
    """``text`` with every URL in it redacted (see :func:`redact_url`) and every credential
    outside a URL (``sk-...``, ``hf_...``, ``Bearer ...``) replaced by ``***``.

    >>> redact_text("key sk-abcdefghijklmnopqrstu at http://u:p@h/v1")
    'key *** at http://***@h/v1'
    """
    text = _SECRET_VALUE.sub(MASK, text)
    if "://" not in text:
        return text
    return _URL.sub(_redact_match, text)


def credentialed_url(text: str) -> bool:
    """Whether ``text`` holds a URL carrying a credential: user info (``user:password@`` or a
    token before ``@``) or a query parameter named like a secret (``?api-key=...``,
    ``&token=...``). Hydra's escapes (``http\\://user\\:pw@host``) are read through.

    >>> credentialed_url("http://user:pw@host/v1"), credentialed_url("http\\\\://u\\\\:pw@host/v1")
    (True, True)
    >>> credentialed_url("https://host/v1?api-key=x"), credentialed_url("http://127.0.0.1:8000/v1?x=1")
    (True, False)
    """
    for m in _URL.finditer(_HYDRA_ESCAPE.sub("", text)):
        if m.group("userinfo"):
            return True
        rest = m.group("rest")
        if "?" in rest and any(
            _SECRET_NAME.match(q.group("name")) and q.group("value")
            for q in _QUERY_VALUE.finditer("?" + rest.split("?", 1)[1])
        ):
            return True
    return False


def secret_override(arg: str) -> str | None:
    """The key of a command-line override that carries a secret, else ``None``.

    A secret is a key whose last part names one (``api_key``, ``hf_token``, ``password``, ...;
    not ``api_key_env``, which names an environment variable), a value that looks like a
    credential (see :func:`redact_text`), a value holding a URL with a credential
    (:func:`credentialed_url`; every value of a sweep ``a,b`` is checked) or a dict value with a
    key that names a secret, at any depth (``{api_key: ...}``, ``{Authorization: ...}``). Options (``--cfg``,
    ``-m``) are not overrides.

    >>> secret_override("+backend.api_key=x"), secret_override("backend.api_key_env=MY_KEY")
    ('backend.api_key', None)
    >>> secret_override("backend.model=sk-0123456789abcdefghij")
    'backend.model'
    >>> secret_override("backend.base_url=http://user:pw@host/v1")
    'backend.base_url'
    >>> secret_override("+backend.extra_body={api_key:x}"), secret_override("+backend.extra_body={top_k:5}")
    ('backend.extra_body.api_key', None)
    """
    if arg.startswith("-") or "=" not in arg:
        return None
    key, value = arg.split("=", 1)
    key = key.lstrip("+~").split("@", 1)[0]
    if _SECRET_NAME.match(key.rsplit(".", 1)[-1]) or _SECRET_VALUE.search(value) or credentialed_url(value):
        return key
    nested = [m.group("name") for m in _DICT_KEY.finditer(value) if _SECRET_NAME.match(m.group("name"))]
    if nested:  # a dict value naming a secret: +backend.extra_body={api_key:...}, default_headers={Authorization:...}
        return f"{key}.{nested[0]}"
    return None


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
