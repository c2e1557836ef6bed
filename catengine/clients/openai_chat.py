"""A model client for any OpenAI-compatible chat-completions endpoint (vLLM, SGLang, llama.cpp's
server, Ollama, LM Studio, a hosted API), through the ``openai`` package.

    from catengine.clients import OpenAIChatClient, Budget

    client = OpenAIChatClient("Qwen/Qwen2.5-7B-Instruct", base_url="http://localhost:8000/v1",
                              sampling={"temperature": 0.5, "top_p": 0.95, "seed": 0, "top_k": 20},
                              budget=Budget(max_completion_tokens=2_000_000))
    completion = client.complete(bank.prompt("math500/0"), max_tokens=10240)
    completion.text, completion.finish_reason, completion.completion_tokens, completion.truncated

Each call sends one ``chat.completions.create`` request: the prompt as the user message (after an
optional system message), ``max_tokens`` and the sampling parameters. Parameters the ``openai``
package knows (``temperature``, ``top_p``, ``seed``, ``stop``, ``presence_penalty``,
``reasoning_effort``, ...) are passed as such; any other (``top_k``, ``min_p``,
``repetition_penalty``, ``chat_template_kwargs``, ...) goes in the request body as it is
(``extra_body``), which is how vLLM, SGLang and llama.cpp read them.

The API key is read from the environment variable ``api_key_env`` (default ``OPENAI_API_KEY``); a
local server needs none, and the placeholder ``"EMPTY"`` is sent when the variable is unset and a
``base_url`` is given.

Faults (:mod:`catengine.clients.retry`): rate limits (429, honouring ``Retry-After``), 408, 409,
5xx, timeouts (``timeout`` seconds per request) and connection failures are retried with
exponential backoff and full jitter, up to ``max_retries`` times; the ``openai`` package's own
retries are off, so this is the only retry policy. A reply that is not valid JSON or has no choices
is retried up to ``malformed_retries`` times. Any other 4xx is not retried. Giving up raises
:class:`~catengine.clients.base.EndpointError` naming the URL, the last error and the attempts. A
reply that arrived (empty content, ``finish_reason: "length"``) is a :class:`Completion`, never
retried. Thread-safe: one ``openai.OpenAI`` client (and its connection pool) serves every thread.

Token counts: ``completion_tokens`` is the server's ``usage.completion_tokens`` (reasoning included:
the CoT length of a LaRT bank), ``reasoning_tokens`` its
``usage.completion_tokens_details.reasoning_tokens`` when reported. A server that returns the
reasoning separately (``reasoning_content``, or ``reasoning``) keeps it in
:attr:`Completion.reasoning`; the final content alone is :attr:`Completion.text`.
"""

from __future__ import annotations

import inspect
import json
import os
import random
import threading
import time
from typing import Mapping

import openai

from catengine.clients.base import Completion, EndpointError
from catengine.clients.budget import Budget, BudgetExceeded
from catengine.clients.retry import RetryPolicy, is_retryable_status, retry_after_seconds
from catengine.closing import Closing
from catengine.errors import CatEngineError

__all__ = ["MalformedReply", "OpenAIChatClient", "parse_chat_completion"]

#: request fields the client sets itself; sampling may not override them
_RESERVED = frozenset({"messages", "model", "stream", "stream_options", "n", "max_tokens", "max_completion_tokens",
                       "extra_headers", "extra_query", "timeout", "tools", "tool_choice", "functions", "function_call"})
#: the longest piece of an error body quoted in a message
_BODY_CHARS = 300


class MalformedReply(CatEngineError, ValueError):
    """A 200 reply that is not a chat completion (not JSON, no choices, no message)."""


def _count(value) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0 else None


def parse_chat_completion(body: bytes | str) -> dict:
    """The fields of a chat-completions reply body that a :class:`Completion` records: ``text``,
    ``reasoning``, ``finish_reason``, ``prompt_tokens``, ``completion_tokens``, ``reasoning_tokens``,
    ``model``. Raises :class:`MalformedReply` saying what is wrong with a body that is not one."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise MalformedReply(f"the reply is not valid JSON ({exc}); it begins {_snippet(body)!r}") from None
    if not isinstance(data, dict):
        raise MalformedReply(f"the reply is JSON {type(data).__name__}, not an object")
    if "error" in data and "choices" not in data:
        raise MalformedReply(f"the reply is an error object: {_snippet(json.dumps(data['error']))}")
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices:
        raise MalformedReply(f"the reply has no choices (keys: {sorted(data)})")
    choice = choices[0]
    message = choice.get("message") if isinstance(choice, dict) else None
    if not isinstance(message, dict):
        raise MalformedReply("the reply's first choice has no message")
    content = message.get("content")
    if isinstance(content, list):  # content parts
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    if content is not None and not isinstance(content, str):
        raise MalformedReply(f"the reply's message content is {type(content).__name__}, not text")
    reasoning = message.get("reasoning_content", message.get("reasoning"))
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    details = usage.get("completion_tokens_details") if isinstance(usage.get("completion_tokens_details"), dict) else {}
    finish = choice.get("finish_reason")
    return {"text": content or "", "reasoning": reasoning if isinstance(reasoning, str) else None,
            "finish_reason": finish if isinstance(finish, str) else None,
            "prompt_tokens": _count(usage.get("prompt_tokens")),
            "completion_tokens": _count(usage.get("completion_tokens")),
            "reasoning_tokens": _count(details.get("reasoning_tokens")),
            "model": data.get("model") if isinstance(data.get("model"), str) else ""}


def _snippet(text, n: int = _BODY_CHARS) -> str:
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[:n] + "..."


class OpenAIChatClient(Closing):
    """The :class:`~catengine.clients.base.ModelClient` of an OpenAI-compatible chat-completions
    endpoint (see the module docstring).

    ``model``: the model name the endpoint serves; ``base_url``: e.g. ``http://localhost:8000/v1``
    (None: the ``openai`` package's default, ``OPENAI_BASE_URL`` or api.openai.com, which needs a
    key); ``api_key_env``: the environment variable holding the key; ``timeout``: seconds per request;
    ``max_retries`` / ``malformed_retries`` / ``backoff_base`` / ``backoff_max`` / ``retry_after_max``:
    the :class:`~catengine.clients.retry.RetryPolicy` (or pass ``retry=``); ``sampling``: extra
    request parameters; ``system_prompt``: a system message before each prompt; ``budget``: a
    :class:`~catengine.clients.budget.Budget` checked before every request (retries included);
    ``max_tokens_param``: the field that carries the output cap (``"max_tokens"``, which every
    OpenAI-compatible server reads, or ``"max_completion_tokens"``, which OpenAI's reasoning models need);
    ``jitter_seed``: seeds the backoff's jitter (None: fresh randomness).
    """

    def __init__(self, model: str, *, base_url: str | None = None, api_key_env: str = "OPENAI_API_KEY",
                 timeout: float = 600.0, max_retries: int = 5, malformed_retries: int = 2,
                 backoff_base: float = 0.5, backoff_max: float = 30.0, retry_after_max: float = 60.0,
                 retry: RetryPolicy | None = None, sampling: Mapping | None = None,
                 system_prompt: str | None = None, budget: Budget | None = None,
                 max_tokens_param: str = "max_tokens", jitter_seed: int | None = None):
        if not isinstance(model, str) or not model:
            raise ValueError(f"model must be a non-empty model name, got {model!r}")
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
            raise ValueError(f"timeout must be a number of seconds > 0, got {timeout!r}")
        if max_tokens_param not in ("max_tokens", "max_completion_tokens"):
            raise ValueError(f"max_tokens_param must be 'max_tokens' or 'max_completion_tokens', got {max_tokens_param!r}")
        if system_prompt is not None and not isinstance(system_prompt, str):
            raise TypeError(f"system_prompt must be a string or None, got {type(system_prompt).__name__}")
        if budget is not None and not isinstance(budget, Budget):
            raise TypeError(f"budget must be a catengine.clients.Budget, got {type(budget).__name__}")
        self.retry = retry if retry is not None else RetryPolicy(
            max_retries=max_retries, malformed_retries=malformed_retries, backoff_base=backoff_base,
            backoff_max=backoff_max, retry_after_max=retry_after_max)
        api_key = os.environ.get(api_key_env) if api_key_env else None
        if not api_key:
            if base_url is None and not os.environ.get("OPENAI_BASE_URL"):
                raise ValueError(f"no API key: the environment variable {api_key_env!r} is unset (a local server "
                                 "needs none: pass its base_url, e.g. http://localhost:8000/v1)")
            api_key = "EMPTY"
        self.model = model
        self.timeout = float(timeout)
        self.system_prompt = system_prompt
        self.budget = budget
        self.max_tokens_param = max_tokens_param
        self._client = openai.OpenAI(base_url=base_url, api_key=api_key, timeout=self.timeout, max_retries=0)
        self.base_url = str(self._client.base_url).rstrip("/")
        self.endpoint = f"{self.base_url}/chat/completions"
        self._create = self._client.chat.completions.with_raw_response.create
        self.sampling = dict(sampling or {})
        self._kwargs, self._extra_body = self._split_sampling(self.sampling)
        self._rng = random.Random(jitter_seed)
        self._rng_lock = threading.Lock()

    def _split_sampling(self, sampling: dict) -> tuple[dict, dict]:
        """(keyword arguments of ``create``, ``extra_body``) for the sampling parameters."""
        known = set(inspect.signature(self._client.chat.completions.create).parameters)
        kwargs, extra = {}, {}
        for key, value in sampling.items():
            if key in _RESERVED:
                raise ValueError(f"sampling may not set {key!r}: the client sets it (max_tokens is an argument "
                                 "of complete(); one completion per request, not streamed)")
            if key == "extra_body":
                if not isinstance(value, Mapping):
                    raise TypeError(f"sampling['extra_body'] must be a mapping, got {type(value).__name__}")
                extra.update(value)
            elif key in known:
                kwargs[key] = value
            else:
                extra[key] = value
        try:
            json.dumps(sampling)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"sampling parameters must be JSON values: {exc}") from None
        return kwargs, extra

    # ------------------------------------------------------------------ the contract
    def request_settings(self, max_tokens: int | None) -> dict:
        """The settings a request records: model, max_tokens, the sampling parameters, the system prompt."""
        settings = {"model": self.model, "max_tokens": max_tokens, **self.sampling}
        if self.system_prompt is not None:
            settings["system_prompt"] = self.system_prompt
        return settings

    def complete(self, prompt: str, *, max_tokens: int | None = None) -> Completion:
        """Ask ``prompt`` (the user message) and return the reply (see the module docstring for the
        retries); raises :class:`EndpointError` once it gives up, and
        :class:`~catengine.clients.budget.BudgetExceeded` before a request the budget refuses."""
        if not isinstance(prompt, str):
            raise TypeError(f"prompt must be a string, got {type(prompt).__name__}")
        if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1):
            raise ValueError(f"max_tokens must be an integer >= 1 or None, got {max_tokens!r}")
        messages = [{"role": "user", "content": prompt}]
        if self.system_prompt is not None:
            messages.insert(0, {"role": "system", "content": self.system_prompt})
        kwargs = dict(self._kwargs)
        if max_tokens is not None:
            kwargs[self.max_tokens_param] = max_tokens
        if self._extra_body:
            kwargs["extra_body"] = self._extra_body
        budget_text = prompt if self.system_prompt is None else self.system_prompt + prompt

        attempts = malformed = 0
        error = None
        while True:
            attempts += 1
            reservation = self._reserve(budget_text, max_tokens, attempts, error if attempts > 1 else None)
            retry_after = None
            started = time.perf_counter()
            try:
                raw = self._create(model=self.model, messages=messages, **kwargs)
                body = raw.http_response.content
                latency = time.perf_counter() - started
                fields = parse_chat_completion(body)
            except openai.APIStatusError as exc:
                self._settle(reservation, replied=False)
                status = exc.status_code
                error = f"HTTP {status}: {_snippet(exc.response.text if exc.response is not None else exc.message)}"
                if not is_retryable_status(status):
                    raise EndpointError(self.endpoint, error + " (not retried)", attempts) from None
                retry_after = retry_after_seconds(exc.response.headers if exc.response is not None else None)
            except openai.APITimeoutError:
                self._settle(reservation, replied=False)
                error = f"no reply within the timeout of {self.timeout:g} s"
            except openai.APIConnectionError as exc:
                self._settle(reservation, replied=False)
                cause = exc.__cause__ or exc.__context__
                error = f"connection failed ({type(cause).__name__}: {cause})" if cause else f"connection failed ({exc})"
            except MalformedReply as exc:
                self._settle(reservation, replied=False)
                malformed += 1
                error = f"malformed reply: {exc}"
                if malformed > self.retry.malformed_retries:
                    raise EndpointError(self.endpoint, error, attempts) from None
            except BaseException:
                self._settle(reservation, replied=False)
                raise
            else:
                self._settle(reservation, fields["prompt_tokens"], fields["completion_tokens"])
                return Completion(text=fields["text"], finish_reason=fields["finish_reason"],
                                  completion_tokens=fields["completion_tokens"], prompt_tokens=fields["prompt_tokens"],
                                  reasoning_tokens=fields["reasoning_tokens"], latency_s=latency, attempts=attempts,
                                  model=fields["model"] or self.model, request=self.request_settings(max_tokens),
                                  reasoning=fields["reasoning"])
            if attempts > self.retry.max_retries:
                raise EndpointError(self.endpoint, error, attempts)
            with self._rng_lock:
                wait = self.retry.delay(attempts, retry_after, self._rng)
            time.sleep(wait)

    def _reserve(self, text: str, max_tokens: int | None, attempt: int, last_error: str | None):
        if self.budget is None:
            return None
        try:
            return self.budget.reserve(text, max_tokens)
        except BudgetExceeded as exc:
            if last_error is not None:
                exc.add_note(f"(refused retry {attempt - 1} of a request to {self.endpoint}; last error: {last_error})")
            raise

    def _settle(self, reservation, prompt_tokens=None, completion_tokens=None, *, replied: bool = True) -> None:
        if reservation is not None:
            self.budget.settle(reservation, prompt_tokens, completion_tokens, replied=replied)

    # ------------------------------------------------------------------ lifetime
    def close(self) -> None:
        """Close the connection pool (the client cannot be used afterwards)."""
        self._client.close()

    def __repr__(self) -> str:
        return f"OpenAIChatClient({self.model!r}, base_url={self.base_url!r})"

