"""Any OpenAI-compatible chat-completions server (vLLM serve, SGLang, llama-cpp-python, OpenAI).

Requests go out concurrently (at most ``max_concurrency`` in flight) through
``openai.AsyncOpenAI``; the client's own retry loop backs off exponentially on 408/409/429/5xx,
timeouts and refused or dropped connections, and a request that still fails raises
:class:`mbs.llm.base.BackendError` naming the backend, URL (credentials redacted), model and
cause. A call returns every requested sample or raises: never a silently shorter list.

A 200 reply without usable text (an HTML page, a body that is not JSON or is cut off, a choice
whose ``content`` is null or not a string) is a backend error too: the request is retried
with the same backoff (0.5 s doubling up to 8 s, with jitter) and, once ``max_retries`` retries
failed, raises :class:`BackendError`. It never becomes a rollout and never reaches the cache.

``generate(requests, on_sample=...)`` hands each completion to ``on_sample`` the moment its
HTTP call returns (the cache stores it there), so a run that fails or is killed loses only
the requests still in flight.

The ``n`` samples of a request are asked for in one call with ``n`` and seed
:func:`mbs.llm.base.sample_seed` ``(seed, first_index)``. Some servers ignore ``n`` (the
llama-cpp-python server answers ``n=3`` with one choice); when fewer choices come back, the
missing samples are drawn singly with seeds ``sample_seed(seed, i)``, and the backend remembers
that the server ignores ``n`` so later requests go straight to single-sample calls. The first
sample's seed is the same in both paths, so a server that ignores ``n`` gives the same sample
``first_index`` either way.

Reasoning models: a server that splits the thinking off (vLLM ``--reasoning-parser``, hosted
reasoning APIs) returns it as ``message.reasoning_content`` (vLLM before 0.11, DeepSeek) or
``message.reasoning`` (vLLM >= 0.11, OpenRouter); it is kept as :attr:`Completion.reasoning` and
the content is the final answer. A server that does not split gets the backend's
``reasoning.format`` applied to the content (:func:`mbs.llm.base.split_completion`).
``reasoning.chat_template_kwargs`` go out as vLLM's ``chat_template_kwargs`` and
``reasoning.effort`` as ``reasoning_effort``. Hosted reasoning APIs (OpenAI o-series, GPT-5) take
the budget as ``max_completion_tokens`` (``max_tokens_param``) and reject sampling parameters
(``omit_params: [temperature, top_p]``); a 400 answer is raised at once (never retried) and names
the rejected parameter.

The API key is read from the environment variable named by ``api_key_env`` when a call starts;
it is never stored on the backend, logged, or written anywhere.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import random
import re
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from mbs.llm.base import (
    BackendError,
    BackendStats,
    ChatRequest,
    Completion,
    normalise_finish_reason,
    sample_seed,
    split_completion,
)
from mbs.reasoning import ReasoningConfig
from mbs.redact import install_log_redaction, redact_url

log = logging.getLogger(__name__)

#: Request fields that can carry the budget L.
TOKEN_PARAMS = ("max_tokens", "max_completion_tokens")
#: Sampling fields a model may reject (hosted reasoning models accept only their defaults).
OMITTABLE = ("temperature", "top_p", "seed")

#: Key sent when ``api_key_env`` is unset or names an unset variable (local servers ignore it).
DUMMY_API_KEY = "EMPTY"

#: Backoff before retry ``k`` (0-based) of a reply without usable text: ``min(cap, base * 2**k)``
#: seconds times a jitter factor in [0.75, 1] (the openai client's own schedule).
BACKOFF_BASE_S, BACKOFF_CAP_S = 0.5, 8.0


class BadReply(Exception):
    """A 200 reply with no usable text (not JSON, cut off, HTML, null or non-string content)."""


class OpenAIBackend:
    """Chat completions from an OpenAI-compatible HTTP server, many requests in flight at once.

    Args:
        base_url: Server URL including the API prefix, e.g. ``http://127.0.0.1:8000/v1``.
        model: Served model name (the ``model`` field of each request).
        api_key_env: Name of the environment variable holding the API key (the key itself is
            never a config value); when ``None`` or unset, the dummy key ``EMPTY`` is sent.
        max_concurrency: Most HTTP requests in flight at once; also ``preferred_batch``, the
            number of requests the cache hands over per call.
        timeout_s: Per-request timeout in seconds (each attempt).
        max_retries: Retries per request after the first attempt (exponential backoff by the
            openai client: 0.5 s doubling up to 8 s, with jitter; honours ``Retry-After``).
        revision: Identifies the served weights in the cache key (e.g. a checkpoint hash);
            ``None``: the model name alone identifies them. The address (``base_url``) never
            does: the same model at another host or port (a requeued job, a proxy, a new
            server) hits the same cache entries.
        use_n: Ask for the ``n`` samples of a request in one call; ``False`` always draws
            single samples.
        name: Backend kind for the cache key.
        extra_body: Extra JSON fields merged into every request body (server-specific options,
            e.g. ``{"top_k": 20}`` for vLLM).
        reasoning: The model's ``reasoning`` config node (:class:`mbs.reasoning.ReasoningConfig`:
            format, chat_template_kwargs, effort); ``None`` for a model that does not think.
        max_tokens_param: Request field carrying the budget L: ``max_tokens`` (vLLM, SGLang,
            llama.cpp) or ``max_completion_tokens`` (hosted reasoning APIs; counts reasoning
            and answer tokens).
        omit_params: Sampling fields never sent (``temperature``, ``top_p``, ``seed``), for
            models that reject them (hosted reasoning models accept only their defaults).

    Raises:
        ValueError: ``max_concurrency`` < 1, ``max_retries`` < 0 or ``timeout_s`` <= 0, an
            invalid ``reasoning`` node, ``max_tokens_param`` or ``omit_params`` entry.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key_env: str | None = "OPENAI_API_KEY",
        max_concurrency: int = 64,
        timeout_s: float = 600.0,
        max_retries: int = 5,
        revision: str | None = None,
        use_n: bool = True,
        name: str = "openai",
        extra_body: dict[str, Any] | None = None,
        reasoning: dict[str, Any] | None = None,
        max_tokens_param: str = "max_tokens",
        omit_params: Sequence[str] = (),
    ):
        if int(max_concurrency) < 1:
            raise ValueError(f"backend.max_concurrency must be >= 1, got {max_concurrency}")
        if int(max_retries) < 0:
            raise ValueError(f"backend.max_retries must be >= 0, got {max_retries}")
        if float(timeout_s) <= 0:
            raise ValueError(f"backend.timeout_s must be > 0, got {timeout_s}")
        self.base_url = str(base_url).rstrip("/")
        self.model = str(model)
        self.api_key_env = api_key_env
        self.max_concurrency = int(max_concurrency)
        self.timeout_s = float(timeout_s)
        self.max_retries = int(max_retries)
        self.revision = revision
        self.use_n = bool(use_n)
        self.name = name
        self.extra_body = dict(extra_body) if extra_body else None
        self.reasoning = ReasoningConfig.of(reasoning)
        if max_tokens_param not in TOKEN_PARAMS:
            raise ValueError(f"backend.max_tokens_param={max_tokens_param!r}: valid values are {', '.join(TOKEN_PARAMS)}")
        self.max_tokens_param = max_tokens_param
        bad = sorted(set(omit_params or ()) - set(OMITTABLE))
        if bad:
            raise ValueError(f"backend.omit_params: {bad} cannot be omitted; valid entries are {', '.join(OMITTABLE)}")
        self.omit_params = tuple(omit_params or ())
        self.preferred_batch = self.max_concurrency
        #: generate() accepts ``on_sample`` (the cache stores each sample as it arrives)
        self.streams_samples = True
        self.stats = BackendStats(extra={"n_ignored": 0, "peak_in_flight": 0, "http_requests": 0, "bad_replies": 0})
        self._server_ignores_n = False
        self._in_flight = 0
        self._lock = threading.Lock()  # stats may be updated from several generate() threads

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(name={self.name!r}, base_url={redact_url(self.base_url)!r}, model={self.model!r}, "
            f"revision={self.revision!r}, api_key_env={self.api_key_env!r}, "
            f"max_concurrency={self.max_concurrency})"
        )

    @property
    def model_id(self) -> str:
        """The model's identity in the cache key: ``model@revision``, or ``model`` without a
        revision; never the address that serves it."""
        return f"{self.model}@{self.revision}" if self.revision else self.model

    @property
    def cache_params(self) -> dict[str, Any]:
        """Settings besides the request that change the output (part of the LLM cache key)."""
        out: dict[str, Any] = {}
        if self.reasoning.cache_params():
            out["reasoning"] = self.reasoning.cache_params()
        if self.extra_body:
            out["extra_body"] = self.extra_body
        if self.max_tokens_param != "max_tokens" or self.omit_params:
            out["request"] = {"max_tokens_param": self.max_tokens_param, "omit_params": sorted(self.omit_params)}
        return out

    @property
    def server_ignores_n(self) -> bool:
        """True once the server answered a request with fewer choices than its ``n``."""
        return self._server_ignores_n

    # -- public API -------------------------------------------------------------------------

    def generate(
        self, requests: Sequence[ChatRequest], on_sample: Callable[[int, Completion], None] | None = None
    ) -> list[list[Completion]]:
        """Draw ``n`` samples per request, all requests concurrently.

        Works from any thread; when the calling thread already runs an event loop, the work runs
        on a helper thread (this call still blocks until done).

        Args:
            requests: The requests.
            on_sample: Called as ``on_sample(request position, completion)`` for each sample the
                moment its HTTP call returned (``sample_index`` set), from the thread running
                the requests; also for samples of a call that fails later.

        Returns:
            One list per request of ``request.n`` completions ordered by sample index.

        Raises:
            BackendError: A request still failed (error status, timeout, connection, or a reply
                without usable text) after ``max_retries`` retries, or the server answered
                with no choices; no partial result is returned.
        """
        requests = list(requests)
        if not requests:
            return []
        t0 = time.perf_counter()
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # the usual case: no loop in this thread
            out = asyncio.run(self._generate_all(requests, on_sample))
        else:
            with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="mbs-openai") as pool:
                out = pool.submit(asyncio.run, self._generate_all(requests, on_sample)).result()
        with self._lock:
            self.stats.seconds += time.perf_counter() - t0
        return out

    def close(self) -> None:
        """Nothing to release: each :meth:`generate` call opens and closes its own client."""

    # -- internals --------------------------------------------------------------------------

    def _make_client(self):
        import openai  # lazy: keeps `import mbs` light

        install_log_redaction()  # httpx logs every request URL, credentials included
        key = os.environ.get(self.api_key_env) if self.api_key_env else None
        return openai.AsyncOpenAI(
            base_url=self.base_url,
            api_key=key or DUMMY_API_KEY,
            timeout=self.timeout_s,
            max_retries=self.max_retries,
        )

    async def _generate_all(
        self, requests: list[ChatRequest], on_sample: Callable[[int, Completion], None] | None
    ) -> list[list[Completion]]:
        sem = asyncio.Semaphore(self.max_concurrency)
        async with self._make_client() as client:
            tasks = [
                asyncio.ensure_future(self._generate_one(client, sem, req, _bind(on_sample, pos)))
                for pos, req in enumerate(requests)
            ]
            try:
                return list(await asyncio.gather(*tasks))
            except BaseException:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                raise

    async def _generate_one(
        self, client, sem: asyncio.Semaphore, req: ChatRequest, on_sample: Callable[[Completion], None] | None
    ) -> list[Completion]:
        got: dict[int, Completion] = {}
        if req.n > 1 and self.use_n and not self._server_ignores_n:
            comps = await self._call(client, sem, req, req.n, sample_seed(req.seed, req.first_index))
            for idx, comp in zip(req.indices, comps):
                comp.sample_index = idx
                got[idx] = comp
                if on_sample is not None:
                    on_sample(comp)
            if len(comps) < req.n:
                with self._lock:
                    self.stats.extra["n_ignored"] += 1
                    first = not self._server_ignores_n
                    self._server_ignores_n = True
                if first:
                    log.info(
                        "%s backend %s (model %s) ignores n (asked %d, got %d choices): "
                        "drawing samples singly from now on",
                        self.name, redact_url(self.base_url), self.model, req.n, len(comps),
                    )
        missing = [idx for idx in req.indices if idx not in got]

        async def single(idx: int) -> None:
            (comp,) = (await self._call(client, sem, req, 1, sample_seed(req.seed, idx)))[:1]
            comp.sample_index = idx
            got[idx] = comp
            if on_sample is not None:
                on_sample(comp)

        await asyncio.gather(*(single(idx) for idx in missing))
        return [got[idx] for idx in req.indices]

    async def _call(self, client, sem: asyncio.Semaphore, req: ChatRequest, n: int, seed: int) -> list[Completion]:
        """One chat-completions call for ``n`` samples; returns at most ``n``, at least one.

        A reply without usable text is retried here (up to ``max_retries`` times, with backoff);
        error statuses, timeouts and connection errors are retried by the openai client.

        Raises:
            BackendError: The call failed after its retries.
        """
        for attempt in range(self.max_retries + 1):
            try:
                return await self._attempt(client, sem, req, n, seed)
            except BadReply as err:
                with self._lock:
                    self.stats.extra["bad_replies"] += 1
                if attempt == self.max_retries:
                    suffix = f" after {attempt} {'retry' if attempt == 1 else 'retries'}" if attempt else ""
                    raise BackendError(f"{self._where()}: reply without usable text ({err}){suffix}") from None
                with self._lock:
                    self.stats.retries += 1
                delay = min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2**attempt) * (1 - 0.25 * random.random())
                log.warning(
                    "%s: reply without usable text (%s); retry %d of %d in %.1f s",
                    self._where(), err, attempt + 1, self.max_retries, delay,
                )
                await asyncio.sleep(delay)
        raise AssertionError("unreachable")

    async def _attempt(self, client, sem: asyncio.Semaphore, req: ChatRequest, n: int, seed: int) -> list[Completion]:
        """One HTTP request (the openai client's own retries included).

        Raises:
            BadReply: A 200 reply without usable text (or with no choices).
            BackendError: An error the client's retries did not cure.
        """
        import openai  # lazy: keeps `import mbs` light

        kwargs = self.request_kwargs(req, n, seed)
        async with sem:
            with self._lock:
                self._in_flight += 1
                self.stats.extra["http_requests"] += 1
                self.stats.extra["peak_in_flight"] = max(self.stats.extra["peak_in_flight"], self._in_flight)
            t0 = time.perf_counter()
            try:
                raw = await client.chat.completions.with_raw_response.create(**kwargs)
                try:
                    response = raw.parse()
                except ValueError as err:  # a 200 body that is not JSON, or is cut off
                    raise BadReply(f"HTTP 200 with a body that is not valid JSON: {_excerpt(raw.text)}") from err
            except BadReply:
                raise
            except openai.APIResponseValidationError as err:
                raise BadReply(f"HTTP 200 that is not a chat completion: {err.message}") from err
            except Exception as err:  # openai.OpenAIError
                retries = self.max_retries if _is_retryable(err) else 0
                with self._lock:
                    self.stats.retries += retries
                raise BackendError(self._describe(err, retries)) from err
            finally:
                with self._lock:
                    self._in_flight -= 1
            dt = time.perf_counter() - t0
        if isinstance(response, (str, bytes)) or not hasattr(response, "choices"):
            raise BadReply(f"HTTP 200 that is not a chat completion: {_excerpt(response)}")
        choices = sorted(response.choices or [], key=lambda c: c.index or 0)[:n]
        if not choices:
            raise BadReply("the server answered with no choices")
        for c in choices:
            _check_usable(c)
        usage = response.usage
        prompt_tokens = int(getattr(usage, "prompt_tokens", 0) or 0)
        total_completion = int(getattr(usage, "completion_tokens", 0) or 0)
        reasons = [normalise_finish_reason(c.finish_reason) for c in choices]
        per_choice = _split_completion_tokens(total_completion, reasons, int(req.max_tokens))
        details = getattr(usage, "completion_tokens_details", None)
        reported = getattr(details, "reasoning_tokens", None) if len(choices) == 1 else None
        comps = []
        for c, reason, k in zip(choices, reasons, per_choice):
            content, server_reasoning = message_parts(c.message)
            comp = Completion(
                text=content, prompt_tokens=prompt_tokens, completion_tokens=k, finish_reason=reason,
                latency_s=dt / len(choices),
            )
            comps.append(split_completion(comp, self.reasoning.format, server_reasoning, reasoning_tokens=reported))
        with self._lock:
            self.stats.calls += 1
            self.stats.retries += int(getattr(raw, "retries_taken", 0) or 0)
            self.stats.add_samples(comps)  # their completion tokens sum to the usage's total
        return comps

    def request_kwargs(self, req: ChatRequest, n: int, seed: int) -> dict[str, Any]:
        """Keyword arguments of one ``chat.completions.create`` call for ``n`` samples of ``req``.

        The budget L goes out as ``max_tokens_param``; ``omit_params`` are left out; the
        reasoning config adds ``reasoning_effort`` and (in the body) ``chat_template_kwargs``.
        """
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": req.messages,
            self.max_tokens_param: int(req.max_tokens),
            "temperature": float(req.temperature),
            "top_p": float(req.top_p),
            "seed": int(seed),
        }
        for key in self.omit_params:
            kwargs.pop(key, None)
        if n > 1:
            kwargs["n"] = int(n)
        if req.stop:
            kwargs["stop"] = list(req.stop)
        if self.reasoning.effort:
            kwargs["reasoning_effort"] = self.reasoning.effort
        body = dict(self.extra_body or {})
        if self.reasoning.chat_template_kwargs:
            body["chat_template_kwargs"] = {**self.reasoning.chat_template_kwargs, **body.get("chat_template_kwargs", {})}
        if body:
            kwargs["extra_body"] = body
        return kwargs

    def _where(self) -> str:
        return f"{self.name} backend {redact_url(self.base_url)} (model {self.model})"

    def _describe(self, err: Exception, retries: int) -> str:
        import openai  # lazy: keeps `import mbs` light

        if isinstance(err, openai.APITimeoutError):
            cause = f"timed out after {self.timeout_s:g} s"
        elif isinstance(err, openai.APIConnectionError):
            cause = "connection refused" if _refused(err) else f"connection error ({_root_cause(err)})"
        elif isinstance(err, openai.APIStatusError):
            cause = f"HTTP {err.status_code}: {err.message}"
            param = rejected_param(err) if err.status_code == 400 else None
            if param:
                cause = f"HTTP 400: the server rejected the request parameter {param!r} ({err.message}); {_fix_for(param)} (not retried)"
        else:
            cause = f"{type(err).__name__}: {err}"
        suffix = f" after {retries} {'retry' if retries == 1 else 'retries'}" if retries else ""
        return f"{self._where()}: {cause}{suffix}"


def _bind(on_sample: Callable[[int, Completion], None] | None, pos: int) -> Callable[[Completion], None] | None:
    return None if on_sample is None else (lambda comp: on_sample(pos, comp))


def _check_usable(choice: Any) -> None:
    """Raise unless a choice has usable text: a string ``content``, or a null ``content`` next to
    the reasoning the server split off (a reasoning model cut off while thinking: an answer-less
    completion, see :func:`mbs.llm.base.split_completion`).

    Raises:
        BadReply: No message, or a ``content`` that is not a string (and not null beside reasoning).
    """
    message = getattr(choice, "message", None)
    content = getattr(message, "content", None) if message is not None else None
    if isinstance(content, str) or (content is None and message is not None and message_parts(message)[1] is not None):
        return
    if message is None:
        what = "no message"
    elif content is None:
        what = "content null"
    else:
        what = f"content of type {type(content).__name__} ({_excerpt(content)})"
    raise BadReply(f"choice {getattr(choice, 'index', '?')} has {what} (finish_reason {getattr(choice, 'finish_reason', None)!r})")


def _excerpt(value: Any, limit: int = 80) -> str:
    text = value.decode("utf-8", "replace") if isinstance(value, bytes) else repr(value) if not isinstance(value, str) else value
    text = " ".join(text.split())
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")


def message_parts(message: Any) -> tuple[str, str | None]:
    """``(content, reasoning)`` of a chat message; ``reasoning`` is ``None`` when the server did
    not split the thinking off (no ``reasoning_content`` / ``reasoning`` field, or ``null``)."""
    if message is None:
        return "", None
    content = getattr(message, "content", None) or ""
    extra = getattr(message, "model_extra", None) or {}
    for key in ("reasoning_content", "reasoning"):
        value = getattr(message, key, None) if key not in extra else extra[key]
        if isinstance(value, str):
            return content, value
    return content, None


def _fix_for(param: str) -> str:
    """The config change that stops sending a rejected request parameter."""
    if param in TOKEN_PARAMS:
        other = next(p for p in TOKEN_PARAMS if p != param)
        return f"set backend.max_tokens_param={other} (hosted reasoning models take max_completion_tokens)"
    if param in OMITTABLE:
        return f"add {param} to backend.omit_params (hosted reasoning models take only their default sampling)"
    if param == "n":
        return "set backend.use_n=false (one sample per request)"
    if param in ("reasoning_effort", "chat_template_kwargs"):
        return "clear backend.reasoning.effort / backend.reasoning.chat_template_kwargs for this server"
    return "remove it from backend.extra_body or the backend config"


_PARAM_IN_MESSAGE = re.compile(r"[Uu]nsupported (?:parameter|value):\s*'([\w.]+)'")


def rejected_param(err: Any) -> str | None:
    """The request parameter a 400 answer rejects: the body's ``param`` field (OpenAI's error
    shape) or the name in an "Unsupported parameter: 'x'" message; ``None`` when not named."""
    body = getattr(err, "body", None)
    if isinstance(body, dict):
        inner = body.get("error") if isinstance(body.get("error"), dict) else body
        if isinstance(inner.get("param"), str) and inner["param"]:
            return inner["param"]
    m = _PARAM_IN_MESSAGE.search(str(getattr(err, "message", "") or err))
    return m.group(1) if m else None


def _is_retryable(err: Exception) -> bool:
    """Whether the openai client retried ``err`` (connection errors, timeouts, 408/409/429/5xx).

    Used to count retries of a failed request: the client exhausts ``max_retries`` on these
    (except when the server forbids it with ``x-should-retry: false`` or a long ``Retry-After``,
    which this count does not see).
    """
    import openai  # lazy: keeps `import mbs` light

    if isinstance(err, openai.APIConnectionError):
        return True
    if isinstance(err, openai.APIStatusError):
        return err.status_code in (408, 409, 429) or err.status_code >= 500
    return False


def _root_cause(err: BaseException) -> BaseException:
    seen = 0
    while err.__cause__ is not None and seen < 16:
        err, seen = err.__cause__, seen + 1
    return err


def _refused(err: BaseException) -> bool:
    cur: BaseException | None = err
    for _ in range(16):
        if cur is None:
            return False
        if isinstance(cur, ConnectionRefusedError) or "refused" in str(cur).lower():
            return True
        cur = cur.__cause__ or cur.__context__
    return False


def _split_completion_tokens(total: int, reasons: list[str], max_tokens: int) -> list[int]:
    """Completion tokens per choice when the server reports only the total of an ``n`` call.

    OpenAI-compatible servers give one ``usage`` per response. A choice that hit the budget
    (``length``) used ``max_tokens`` tokens; the rest of the total is split evenly over the
    other choices (remainder to the first ones), so the counts always sum to ``total``. When
    that is impossible (inconsistent usage) the total is split evenly over all choices.
    """
    k = len(reasons)
    if k == 1:
        return [total]
    n_len = sum(r == "length" for r in reasons)
    rest = total - n_len * max_tokens
    others = k - n_len
    if n_len and others and rest >= 0:
        base, extra = divmod(rest, others)
        out, j = [], 0
        for r in reasons:
            if r == "length":
                out.append(max_tokens)
            else:
                out.append(base + (1 if j < extra else 0))
                j += 1
        return out
    base, extra = divmod(total, k)
    return [base + (1 if j < extra else 0) for j in range(k)]
