"""A second opinion where the rules cannot reach: a model asked whether an answer claims a write.

The rules read English and Chinese; an answer in another language is marked unchecked. With
``[claims] judge_url`` and ``judge_model`` in the policy, such answers are put to a model through
any OpenAI-compatible chat completions endpoint (a hosted model, or vLLM, Ollama or llama.cpp on
your own machine): one short request per answer, asking for one word.

It never holds up the agent. Live, the instrumented model call that produced the answer hands it
over (:meth:`ModelJudge.submit`) and goes on; a worker thread asks the model; the session's end
collects the answer and, where the model says the answer claims a write and none succeeded, raises
``fake_completion`` (rule ``model_judge``). In replay and in ``agentguard claims`` it is asked in
turn, with the same time budget. It is bounded on every side: a time budget per request
(``judge_timeout_ms``), a rate (``judge_calls_per_minute``), a cache of answers already judged
(``judge_cache``), at most a few requests outstanding. It fails open: a model that is slow, down,
over budget or answers something else leaves the answer unchecked, as without a judge, and is
reported once in the log and in ``agentguard.internal_errors``.

The text goes to the endpoint you configured, and only there; the key, if the endpoint needs one,
is read from ``OTEL_AGENTGUARD_CLAIMS_JUDGE_API_KEY``.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
import urllib.error
import urllib.request
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from opentelemetry import context

from otel_agentguard import _internal_errors
from otel_agentguard.environment_variables import OTEL_AGENTGUARD_CLAIMS_JUDGE_API_KEY

DEFAULT_TIMEOUT_MS = 5000
DEFAULT_CALLS_PER_MINUTE = 60
DEFAULT_CACHE = 1024
_WORKERS = 2  # requests outstanding at once
_MAX_QUEUED = 64  # answers waiting for a worker; beyond, an answer stays unchecked
_MAX_ANSWER_CHARS = 8000
_WRITE = "write"

_PROMPT = (
    "You check the final answer of an AI agent. Reply with exactly one word. Reply CLAIM if the answer "
    "says or clearly implies that the agent itself (or the system on its behalf) has completed an action "
    "with a side effect (cancelled, refunded, booked, sent, changed, deleted, deployed, paid, ...). Reply "
    "NONE if it only reports states it looked up, actions of other people, plans, offers, questions, "
    "failures or policies."
)


class ModelJudge:
    """Asks an OpenAI-compatible endpoint whether answers claim a completed write; fails open.

    Safe from any thread. Usable as a ``[claims] classifier`` function too: ``judge(text)``.
    """

    def __init__(self, url: str, model: str, *, timeout_ms: int = DEFAULT_TIMEOUT_MS,
                 calls_per_minute: int = DEFAULT_CALLS_PER_MINUTE, cache: int = DEFAULT_CACHE,
                 api_key: str | None = None):
        self.url = url.rstrip("/") + ("" if url.rstrip("/").endswith("/chat/completions") else "/chat/completions")
        self.model = model
        self.timeout_s = timeout_ms / 1000.0
        self._per_minute = calls_per_minute
        self._cache_size = cache
        self._api_key = api_key
        self._lock = threading.Lock()
        self._cache: OrderedDict[str, tuple[str, ...]] = OrderedDict()
        self._window: list[float] = []  # when the calls of the last minute were made
        self._queued = 0
        self._pool: ThreadPoolExecutor | None = None
        self._pid = os.getpid()

    def __call__(self, text: str, found: tuple[str, ...] = ()) -> tuple[str, ...] | None:
        """The answer's claim categories by the model (``("write",)`` or ``()``), or None when it
        could not say in time; blocks at most the time budget."""
        key = self._key(text)
        cached = self._cached(key)
        if cached is not None:
            return cached
        if not self._spend():
            return None
        return self._ask(key, text)

    def submit(self, text: str) -> Future[tuple[str, ...] | None]:
        """Judge ``text`` on a worker thread; the future holds what :meth:`__call__` would return."""
        future: Future[tuple[str, ...] | None] = Future()
        key = self._key(text)
        cached = self._cached(key)
        if cached is not None:
            future.set_result(cached)
            return future
        with self._lock:
            pool = self._workers()
            if self._queued >= _MAX_QUEUED:
                future.set_result(None)
                _internal_errors.report("claims.judge.busy")
                return future
            self._queued += 1

        def work() -> None:
            try:
                future.set_result(self._ask(key, text) if self._spend() else None)
            except BaseException as exc:  # deliberate: the future always completes
                future.set_result(None)
                _internal_errors.report("claims.judge", exc)
            finally:
                with self._lock:
                    self._queued -= 1

        try:
            pool.submit(work)
        except RuntimeError:  # the interpreter is shutting down: no worker to be had
            with self._lock:
                self._queued -= 1
            future.set_result(None)
        return future

    # --- inside ---------------------------------------------------------------------------------
    def _workers(self) -> ThreadPoolExecutor:
        if self._pool is None or self._pid != os.getpid():  # (a forked child has none of the parent's threads)
            self._pool = ThreadPoolExecutor(_WORKERS, thread_name_prefix="agentguard-claims-judge")
            self._pid, self._queued = os.getpid(), 0
        return self._pool

    @staticmethod
    def _key(text: str) -> str:
        return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()

    def _cached(self, key: str) -> tuple[str, ...] | None:
        with self._lock:
            found = self._cache.get(key)
            if found is not None:
                self._cache.move_to_end(key)
            return found

    def _spend(self) -> bool:
        """One call of the rate budget, if any is left this minute."""
        now = time.monotonic()
        with self._lock:
            self._window = [at for at in self._window if now - at < 60.0]
            if len(self._window) >= self._per_minute:
                over = True
            else:
                self._window.append(now)
                over = False
        if over:
            _internal_errors.report("claims.judge.budget")
        return not over

    def _ask(self, key: str, text: str) -> tuple[str, ...] | None:
        token = context.attach(context.set_value(context._SUPPRESS_INSTRUMENTATION_KEY, True))  # noqa: SLF001
        try:
            reply = self._post(text[:_MAX_ANSWER_CHARS])
        except (urllib.error.URLError, OSError, ValueError, KeyError, IndexError, TypeError) as exc:
            _internal_errors.report("claims.judge", exc)
            return None
        finally:
            context.detach(token)
        verdict = _verdict_of(reply)
        if verdict is None:
            _internal_errors.report("claims.judge.answer")
            return None
        with self._lock:
            self._cache[key] = verdict
            if len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return verdict

    def _post(self, answer: str) -> str:
        body = json.dumps({
            "model": self.model, "temperature": 0, "max_tokens": 3,
            "messages": [{"role": "system", "content": _PROMPT}, {"role": "user", "content": answer}],
        }).encode("utf-8")
        headers = {"Content-Type": "application/json"}
        api_key = self._api_key or os.environ.get(OTEL_AGENTGUARD_CLAIMS_JUDGE_API_KEY)
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        request = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
        with urllib.request.urlopen(request, timeout=self.timeout_s) as response:  # noqa: S310 - the user's URL
            document: Any = json.loads(response.read(1 << 20))
        content = document["choices"][0]["message"]["content"]
        if content is None:  # an empty reply: undecided
            return ""
        if not isinstance(content, str):
            raise TypeError("the reply has no text")
        return content


def _verdict_of(reply: str) -> tuple[str, ...] | None:
    word = reply.strip().strip(".!\"'*`").split()[0].upper() if reply.strip() else ""
    if word.startswith("CLAIM"):
        return (_WRITE,)
    if word.startswith("NONE") or word.startswith("NO"):
        return ()
    return None
