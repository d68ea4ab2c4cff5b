"""World model behind an OpenAI-compatible chat endpoint (vLLM, SGLang, hosted APIs).

Requests go through :class:`openai.AsyncOpenAI` with the client's own retries
turned off: this module retries itself, with jittered exponential backoff, on
HTTP 408/409/429/5xx, timeouts, dropped connections and answers that are not a
chat completion (HTML, a body that is not UTF-8 or not JSON, JSON without
choices: :class:`NotACompletionError`). The body is parsed here, not by the
SDK, so no garbage can escape as a decoding error. While the endpoint is
otherwise healthy a backoff never exceeds its typical latency (see
:class:`RetryPolicy` and :class:`EndpointHealth`): a few unlucky steps do not
hold a run's tail. A request that finally fails becomes an
:class:`~fidelity.trajectory.Observation` whose ``error`` names the error class and
what came back; only an endpoint that refuses every connection attempt raises
:class:`~fidelity.errors.EndpointUnreachableError`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import statistics
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any

import openai

from fidelity.defaults import MAX_RETRIES, MAX_TOKENS, REQUEST_DEADLINE, TOP_K
from fidelity.errors import (
    EndpointUnreachableError,
    MalformedPredictionError,
    UsageError,
    WorldModelError,
)
from fidelity.trajectory import Action, Observation, Step, Trajectory
from fidelity.worldmodels.base import WorldModel
from fidelity.worldmodels.cache import BatchedLookup, ResponseCache, request_key
from fidelity.worldmodels.prompting import AWB_META, build_messages, parse_prediction, prompt_set

logger = logging.getLogger(__name__)

RETRY_STATUSES = frozenset({408, 409, 429})
#: ``recommended``: the model card's temperature/top_p/top_k; ``agentworldbench``: exactly
#: what the reference script sends (temperature 0.6 and max_tokens, nothing else).
SAMPLING_PRESETS = ("recommended", "agentworldbench")
_MESSAGE_LIMIT = 300
_PREVIEW_BYTES = 60
_HTML_TAGS = ("<!doctype html", "<html", "<head", "<body")


@dataclass(frozen=True)
class RetryPolicy:
    """How failed requests are retried.

    Attempt ``n`` (0-based) that fails with a retryable error waits
    ``min(backoff_max, backoff_base * 2**n, bound)`` seconds, scaled by a
    random factor in ``[1 - jitter, 1]``. ``bound`` is the endpoint's typical
    latency while it is otherwise healthy (:meth:`EndpointHealth.backoff_bound`),
    else none: a step that failed twice in a row does not wait seconds while
    its neighbours are answered in 200 ms. A ``Retry-After`` header always
    raises the wait to what the server asked, capped by ``backoff_max``.
    """

    max_retries: int = MAX_RETRIES
    backoff_base: float = 0.5
    backoff_max: float = 30.0
    jitter: float = 0.5

    def delay(
        self, attempt: int, retry_after: float | None = None, bound: float | None = None
    ) -> float:
        """Seconds to wait after failed attempt *attempt* (0-based)."""
        wait = min(self.backoff_max, self.backoff_base * 2.0**attempt)
        if bound is not None:
            wait = min(wait, bound)
        wait *= 1.0 - self.jitter * random.random()
        if retry_after is not None:
            wait = max(wait, min(retry_after, self.backoff_max))
        return wait


class EndpointHealth:
    """Recent outcomes of the requests to one endpoint, shared by its concurrent requests.

    The endpoint is *healthy* once at least *min_samples* of the last *window*
    attempts are known and at least *healthy_ratio* of them succeeded; its
    typical latency is the median of the recent successful attempts.
    """

    def __init__(self, window: int = 64, min_samples: int = 8, healthy_ratio: float = 0.5) -> None:
        self.min_samples = min_samples
        self.healthy_ratio = healthy_ratio
        self._outcomes: deque[bool] = deque(maxlen=window)
        self._latencies: deque[float] = deque(maxlen=window)

    def record(self, ok: bool, seconds: float) -> None:
        """Count one attempt; *seconds* is its latency (kept for successes only)."""
        self._outcomes.append(ok)
        if ok:
            self._latencies.append(seconds)

    def backoff_bound(self) -> float | None:
        """The typical latency while the endpoint is otherwise healthy; None (no bound)
        while too little is known or most recent attempts failed (an overloaded or
        broken endpoint gets the full exponential backoff)."""
        if len(self._outcomes) < self.min_samples or not self._latencies:
            return None
        if sum(self._outcomes) < self.healthy_ratio * len(self._outcomes):
            return None
        return statistics.median(self._latencies)


class RequestFailedError(WorldModelError):
    """A request that failed for good (after retries).

    Its message starts with the class of the last underlying error and the
    HTTP status (``InternalServerError: HTTP 500 from URL: … (after 5
    attempts)``) and becomes the ``error`` of the observation as it is.
    """


class TruncatedAnswerError(MalformedPredictionError):
    """The endpoint stopped the answer at ``max_tokens``: an infrastructure failure, not drift."""


class NotACompletionError(WorldModelError):
    """A 2xx answer whose body is not an OpenAI chat completion (HTML, not UTF-8, not JSON,
    JSON without choices, empty): retried like a 5xx; its message says what came back."""


@dataclass
class _Attempts:
    """What the retry loop saw, for the final error message."""

    count: int = 0
    refused: int = 0
    last: str | None = None


@dataclass(frozen=True)
class _Failure:
    """One failed attempt: its one-line description and how to go on."""

    message: str
    retryable: bool
    retry_after: float | None = None
    refused: bool = False


@dataclass(frozen=True)
class _Choice:
    """The first choice of a chat completion."""

    content: str | None
    finish_reason: str | None


def _is_refused(error: BaseException) -> bool:
    """True when *error* (or its cause chain) is a refused or unresolvable connection."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ConnectionRefusedError) or type(current).__name__ in {
            "ConnectError",
            "gaierror",
        }:
            return True
        current = current.__cause__ or current.__context__
    return False


def _retry_after(error: openai.APIStatusError) -> float | None:
    """Seconds the server asked to wait: ``retry-after-ms``, else ``Retry-After`` in seconds
    or as an HTTP date; None when absent or unreadable."""
    headers = error.response.headers
    milliseconds = _seconds(headers.get("retry-after-ms"))
    if milliseconds is not None:
        return milliseconds / 1000
    value = headers.get("retry-after")
    seconds = _seconds(value)
    if seconds is not None or value is None:
        return seconds
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError):
        return None


def _seconds(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


def _short(text: object) -> str:
    one_line = " ".join(str(text).split())
    return one_line if len(one_line) <= _MESSAGE_LIMIT else one_line[: _MESSAGE_LIMIT - 1] + "…"


class OpenAICompatWorldModel(WorldModel):
    """A language world model served behind ``/v1/chat/completions``.

    Sampling defaults are Qwen-AgentWorld's recommendation (temperature 0.6,
    top_p 0.95, top_k 20, max_tokens 32768); ``top_k`` is sent in the request
    body (pass ``top_k=None`` for APIs that reject it). ``sampling=
    "agentworldbench"`` sends exactly what the reference script sends:
    temperature 0.6 and max_tokens, nothing else. An answer cut by the length
    limit (``finish_reason == "length"``) is an infrastructure failure. ``timeout``
    applies to each attempt; ``max_retries`` retries follow the first attempt,
    waiting as :class:`RetryPolicy` says (``backoff_base``/``backoff_max``,
    bounded by *health*'s typical latency while the endpoint is otherwise
    healthy); ``deadline`` (seconds, None: none) bounds the whole request.
    *sleep* waits out each backoff (tests pass one that records the delays).
    """

    name = "openai-compat"

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str = "EMPTY",
        timeout: float = 60,
        max_retries: int = MAX_RETRIES,
        temperature: float | None = 0.6,
        top_p: float | None = 0.95,
        top_k: int | None = TOP_K,
        max_tokens: int | None = MAX_TOKENS,
        prompts_dir: Path | str | None = None,
        backoff_base: float = 0.5,
        backoff_max: float = 30.0,
        cache: ResponseCache | None = None,
        deadline: float | None = REQUEST_DEADLINE,
        sampling: str = "recommended",
        health: EndpointHealth | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        if max_retries < 0 or timeout <= 0 or backoff_base < 0:
            raise UsageError("max_retries and backoff_base must be >= 0 and timeout > 0")
        _check_deadline(deadline)
        if sampling not in SAMPLING_PRESETS:
            raise UsageError(f"--sampling {sampling!r}: choose {' or '.join(SAMPLING_PRESETS)}")
        if sampling == "agentworldbench":
            temperature, top_p, top_k = 0.6, None, None
        self.sampling_preset = sampling
        self.deadline = deadline
        timeout = timeout if deadline is None else min(timeout, deadline)
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.timeout = timeout
        self.temperature = temperature
        self.top_p = top_p
        self.top_k = top_k
        self.max_tokens = max_tokens
        self.prompts_dir = prompts_dir
        self.retry = RetryPolicy(max_retries, backoff_base, backoff_max)
        self.health = health if health is not None else EndpointHealth()
        self._sleep = sleep
        self.prompts = prompt_set(prompts_dir)
        self._prompt_hash = self.prompts.hash
        self.cache = cache
        self._lookup = BatchedLookup(cache) if cache is not None else None
        self._client = openai.AsyncOpenAI(
            base_url=self.base_url, api_key=api_key, timeout=timeout, max_retries=0
        )

    async def predict(
        self,
        trajectory: Trajectory,
        history: list[Step],
        action: Action,
        depth: int,
        sample: int = 0,
    ) -> Observation:
        """Ask the endpoint (or the response cache) for the observation after *action*.

        A failed request, a malformed answer or a history with a failed step
        gives an observation whose ``error`` says why. Raises
        :class:`EndpointUnreachableError` when every attempt was refused and
        :class:`~fidelity.errors.UnknownDomainError` when the domain has no
        prompt templates.
        """
        problem = _history_problem(history)
        if problem is not None:
            return Observation(error=f"WorldModelError: {problem}")
        messages = build_messages(trajectory, history, action, depth, self.prompts_dir)
        try:
            content = await self.cached_complete(messages, sample)
            return parse_prediction(content, action, trim_block=AWB_META in trajectory.meta)
        except (RequestFailedError, MalformedPredictionError) as error:
            return Observation(error=_error_text(error))

    def sampling(self) -> dict[str, Any]:
        """The sampling parameters sent with every request (part of the cache key)."""
        return {
            "temperature": self.temperature,
            "top_p": self.top_p,
            "top_k": self.top_k,
            "max_tokens": self.max_tokens,
        }

    async def cached_complete(self, messages: list[dict[str, str]], sample: int = 0) -> str | None:
        """:meth:`complete`, answered from the response cache when it holds the request.

        Sample *sample* of a request is cached apart from its other samples;
        only successful completions are stored.
        """
        if self.cache is None or self._lookup is None:
            return await self.complete(messages)
        params = self.sampling()
        key = request_key(self.model, messages, params, sample)
        hit, content = await self._lookup.lookup(key)
        if hit:
            return content
        content = await self.complete(messages)
        self.cache.put(key, self.model, sample, params, content)
        return content

    async def complete(self, messages: list[dict[str, str]]) -> str | None:
        """The assistant content for *messages*, within the request's total deadline.

        The deadline bounds the whole request, every attempt and backoff wait
        included: a server that drips a byte every few seconds (which never trips
        a per-read timeout) or one that accepts connections and never answers
        costs at most ``deadline`` seconds, then :class:`RequestFailedError`
        naming the deadline.
        """
        attempts = _Attempts()
        if self.deadline is None:
            return await self._complete_with_retries(messages, attempts)
        try:
            async with asyncio.timeout(self.deadline):
                return await self._complete_with_retries(messages, attempts)
        except TimeoutError:
            failure = _deadline_failure(self.base_url, self.deadline)
            if attempts.last is not None:
                failure += f"; the last attempt failed with {attempts.last}"
            logger.debug(
                "%s: deadline of %g s passed after %d failed attempts",
                self.base_url,
                self.deadline,
                attempts.count,
            )
            raise RequestFailedError(failure) from None

    async def _complete_with_retries(
        self, messages: list[dict[str, str]], attempts: _Attempts
    ) -> str | None:
        """The assistant content for *messages*, retrying transient failures.

        Raises :class:`~fidelity.errors.EndpointUnreachableError` when every
        attempt was refused, ``MalformedPredictionError`` for an unusable
        answer, and :class:`RequestFailedError` for other final failures.
        """
        while True:
            started = time.monotonic()
            outcome = await self._attempt(messages)
            self.health.record(isinstance(outcome, _Choice), time.monotonic() - started)
            if isinstance(outcome, _Choice):
                return _content(outcome)
            attempts.count += 1
            attempts.refused += outcome.refused
            attempts.last = outcome.message
            if not outcome.retryable or attempts.count > self.retry.max_retries:
                final = "not retried" if not outcome.retryable else "no retry left"
                logger.debug(
                    "%s: attempt %d failed, %s: %s",
                    self.base_url,
                    attempts.count,
                    final,
                    outcome.message,
                )
                raise self._final(outcome.message, attempts)
            bound = self.health.backoff_bound()
            delay = self.retry.delay(attempts.count - 1, outcome.retry_after, bound)
            logger.debug(
                "%s: attempt %d failed, retried in %.2f s (%d retries left): %s",
                self.base_url,
                attempts.count,
                delay,
                self.retry.max_retries - attempts.count + 1,
                outcome.message,
            )
            await self._sleep(delay)

    async def _attempt(self, messages: list[dict[str, str]]) -> _Choice | _Failure:
        """One request: the completion's first choice, or what went wrong."""
        try:
            return _first_choice(await self._create(messages))
        except openai.APIStatusError as error:
            retryable = error.status_code in RETRY_STATUSES or error.status_code >= 500
            return _Failure(_status_failure(error, self.base_url), retryable, _retry_after(error))
        except openai.APIConnectionError as error:  # includes APITimeoutError
            failure = _connection_failure(error, self.base_url, self.timeout)
            return _Failure(failure, True, refused=_is_refused(error))
        except NotACompletionError as error:
            failure = f"{type(error).__name__}: {self.base_url} answered {error}"
            return _Failure(_short(failure), True)

    async def _create(self, messages: list[dict[str, str]]) -> bytes:
        """POST the request body as is and return the raw answer body.

        The SDK's typed-dict transform costs ~10 ms of CPU per request with long
        histories, which bounds throughput under concurrency; and its response
        parsing lets garbage escape (a body that is not UTF-8 raises
        ``UnicodeDecodeError``, an HTML page comes back as a string), so
        :func:`_first_choice` parses the body instead.
        """
        body: dict[str, Any] = {"model": self.model, "messages": messages}
        for name, value in self.sampling().items():
            if value is not None:
                body[name] = value
        return await self._client.post("/chat/completions", body=body, cast_to=bytes)

    def _final(self, failure: str, attempts: _Attempts) -> Exception:
        if attempts.refused == attempts.count:
            return EndpointUnreachableError(
                f"world-model endpoint {self.base_url} refused all {attempts.count} connection "
                f"attempts: start the server (e.g. `vllm serve {self.model}`) or pass --sim-url "
                "with the URL of a running OpenAI-compatible endpoint"
            )
        tries = "1 attempt" if attempts.count == 1 else f"{attempts.count} attempts"
        return RequestFailedError(f"{failure} (after {tries})")

    def describe(self) -> dict[str, str]:
        """Backend, endpoint, model, sampling parameters and prompt hash."""
        return {
            "backend": self.name,
            "base_url": self.base_url,
            "model": self.model,
            "temperature": str(self.temperature),
            "top_p": str(self.top_p),
            "top_k": str(self.top_k),
            "max_tokens": str(self.max_tokens),
            "timeout": str(self.timeout),
            "max_retries": str(self.retry.max_retries),
            "deadline": str(self.deadline),
            "sampling": self.sampling_preset,
            "prompt_hash": self._prompt_hash,
            "prompts_kind": self.prompts.kind,
            "prompts_path": self.prompts.path,
            **({"cache": str(self.cache.path)} if self.cache is not None else {}),
        }

    async def check(self) -> None:
        """Fail fast before a run: the endpoint answers and serves ``self.model``.

        Raises :class:`EndpointUnreachableError` when it cannot be reached and
        :class:`~fidelity.errors.UsageError` when the model is not served.
        """
        try:
            body = await self._list_models()
        except openai.APIConnectionError as error:
            raise EndpointUnreachableError(
                f"world-model endpoint {self.base_url} does not answer "
                f"({_connection_failure(error, self.base_url, self.timeout)}): start the "
                "server or pass --sim-url with the URL of a running endpoint"
            ) from error
        except openai.APIStatusError:
            return  # it answers, it just does not list models (not every server does)
        served = _served_models(body)
        if served and self.model not in served:
            raise UsageError(
                f"{self.base_url} does not serve model {self.model!r} "
                f"(it serves: {', '.join(served)})"
            )

    async def _list_models(self) -> bytes:
        """``GET /models`` (the raw body), within the request deadline (a dripping server
        cannot hold it)."""
        if self.deadline is None:
            return await self._client.get("/models", cast_to=bytes)
        try:
            async with asyncio.timeout(self.deadline):
                return await self._client.get("/models", cast_to=bytes)
        except TimeoutError:
            raise EndpointUnreachableError(
                f"world-model endpoint {self.base_url} does not answer: "
                f"{_deadline_failure(self.base_url, self.deadline)}"
            ) from None

    async def aclose(self) -> None:
        """Close the HTTP connection pool and the response cache."""
        await self._client.close()
        if self.cache is not None:
            self.cache.close()


def _history_problem(history: list[Step]) -> str | None:
    for depth, step in enumerate(history, start=1):
        if step.observation is None:
            return f"history step {depth} has no observation"
        if step.observation.failed:
            return f"history step {depth} failed earlier ({step.observation.error})"
    return None


def _content(choice: _Choice) -> str | None:
    if choice.finish_reason == "length":
        raise TruncatedAnswerError(
            "the answer was cut by the length limit (finish_reason=length): raise --max-tokens "
            f"(the model card uses {MAX_TOKENS})"
        )
    return choice.content


def _first_choice(body: bytes) -> _Choice:
    """The first choice of the chat completion in *body*; :class:`NotACompletionError`
    naming what came back instead (``answered <what>, not an OpenAI chat completion…``)."""
    data = _json_body(body)
    choices = data.get("choices") if isinstance(data, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        shape = f"keys: {', '.join(map(str, data))[:80]}" if isinstance(data, dict) else "no keys"
        what = "JSON with no choices" if isinstance(data, dict) and "choices" in data else "JSON"
        raise _not_a_completion(f"{what} ({shape})", body)
    message = choices[0].get("message")
    content = message.get("content") if isinstance(message, dict) else None
    if content is not None and not isinstance(content, str):
        raise _not_a_completion("JSON whose choices[0].message.content is not a string", body)
    if content is not None and not _encodable(content):
        raise _not_a_completion("JSON whose content holds a lone surrogate escape", body)
    finish = choices[0].get("finish_reason")
    return _Choice(content, finish if isinstance(finish, str) else None)


def _encodable(text: str) -> bool:
    """Whether *text* is valid Unicode (JSON's ``\\ud800`` escapes decode to lone surrogates)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _json_body(body: bytes) -> Any:
    """*body* decoded as UTF-8 JSON; :class:`NotACompletionError` saying why it is not."""
    if not body.strip():
        raise NotACompletionError(
            f"an empty body ({len(body)} bytes), not an OpenAI chat completion"
        )
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as error:
        where = f"byte 0x{body[error.start]:02x} at offset {error.start} of {len(body)}"
        raise _not_a_completion(f"a body that is not valid UTF-8 ({where})", body) from None
    head = text.lstrip()[:512].lower()
    if head.startswith("<") and any(tag in head for tag in _HTML_TAGS):
        raise _not_a_completion("an HTML page", body)
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        what = f"a body that is not JSON ({error.msg}: char {error.pos} of {len(text)})"
        raise _not_a_completion(what, body) from None


def _not_a_completion(what: str, body: bytes) -> NotACompletionError:
    preview = body[:_PREVIEW_BYTES].decode("utf-8", errors="backslashreplace")
    more = "…" if len(body) > _PREVIEW_BYTES else ""
    return NotACompletionError(
        f"{what}, not an OpenAI chat completion: {_short(repr(preview))}{more}"
    )


def _served_models(body: bytes) -> list[str]:
    """The model ids of a ``GET /models`` answer; [] when it is not a model list."""
    try:
        data = json.loads(body.decode("utf-8"))
    except ValueError:  # not UTF-8, not JSON: it answers, just not with a usable list
        return []
    entries = data.get("data") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        return []
    return [str(e["id"]) for e in entries if isinstance(e, dict) and "id" in e]


def _status_failure(error: openai.APIStatusError, base_url: str) -> str:
    return (
        f"{type(error).__name__}: HTTP {error.status_code} from {base_url}: {_short(error.message)}"
    )


def _connection_failure(error: openai.APIConnectionError, base_url: str, timeout: float) -> str:
    if isinstance(error, openai.APITimeoutError):
        return f"APITimeoutError: no answer from {base_url} within {timeout:g} s"
    cause = error.__cause__
    detail = f"{type(cause).__name__}: {_short(cause)}" if cause is not None else _short(error)
    return f"{type(error).__name__}: {base_url}: {detail}"


def _error_text(error: Exception) -> str:
    if isinstance(error, RequestFailedError):
        return str(error)
    return f"{type(error).__name__}: {error}"


def _check_deadline(deadline: float | None) -> None:
    if deadline is not None and deadline <= 0:
        raise UsageError(f"--sim-timeout {deadline:g}: the request deadline must be > 0 seconds")


def _deadline_failure(base_url: str, deadline: float) -> str:
    return (
        f"DeadlineExceeded: no complete answer from {base_url} within the request "
        f"deadline of {deadline:g} s (--sim-timeout; attempts and retries included)"
    )
