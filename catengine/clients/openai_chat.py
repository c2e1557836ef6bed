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

Faults (:mod:`catengine.clients.retry`): rate limits (429, honouring ``Retry-After`` in seconds or
as an HTTP date), 408, 409, 5xx (an HTML error page from a reverse proxy included), timeouts
(``timeout`` seconds per request) and connection failures are retried with exponential backoff and
full jitter, up to ``max_retries`` times; the ``openai`` package's own retries are off, so this is
the only retry policy. Any other 4xx is not retried, nor is a 429 that says the account's quota is
exhausted (``insufficient_quota``). A 200 reply that is an error object (``{"error": {...}}``, as
some proxies and OpenRouter send) is treated as the HTTP status its ``code`` names (retried or not,
as above; up to ``malformed_retries`` times when it names none). A 200 reply whose generation the
server ended itself (``finish_reason`` "abort" or "error" from vLLM, SGLang or OpenRouter,
"insufficient_system_resource" from DeepSeek) is not the model's answer and is retried like a server
error. A reply that is not a chat completion (not JSON, an HTML page, no choices) is retried up to
``malformed_retries`` times. Giving up raises :class:`~catengine.clients.base.EndpointError` naming
the URL, the last error (with the status, the code or the value that was wrong) and the attempts. A
reply that arrived (empty content, a refusal, ``finish_reason: "length"``) is a :class:`Completion`,
never retried. Thread-safe: one ``openai.OpenAI`` client (and its connection pool) serves every
thread.

Replies are read as the servers send them: the content as text or as a list of parts; a reply sent
as an event stream (``data: {...}`` chunks, from a proxy that streams regardless) is put together;
unknown fields are ignored. ``finish_reason`` is kept as reported ("stop", "eos", "stop_sequence",
...; None when absent), except that the names of a stop at the output cap ("length", "max_tokens",
"max_output_tokens", "model_length", any case) are all "length"; a reply with no finish reason whose
completion tokens reached ``max_tokens`` stopped at the cap and is "length" too.

Token counts: ``completion_tokens`` is the server's ``usage.completion_tokens`` (reasoning included:
the CoT length of a LaRT bank), ``reasoning_tokens`` its
``usage.completion_tokens_details.reasoning_tokens`` when reported. A server that counts the
reasoning outside ``completion_tokens`` (xAI; some Gemini proxies: ``total_tokens`` is then prompt +
completion + reasoning, or the reasoning tokens exceed the completion tokens) has them added back, so
``completion_tokens`` always includes the reasoning; a server that reports ``total_tokens`` and
``prompt_tokens`` only has their difference. A server that reports no usage (``usage`` missing or
null) leaves ``completion_tokens`` None: the CoT length is unknown (recorded as such, never guessed),
a :class:`Budget` charges the request's worst case, and the client warns once
(:class:`MissingUsageWarning`).

Reasoning: a server that returns the reasoning apart from the answer (``reasoning_content``,
``reasoning``, ``thinking``, OpenRouter's ``reasoning_details``, thinking parts of the content) keeps
it in :attr:`Completion.reasoning`, and the final content alone is :attr:`Completion.text`. A
reasoning model served without a reasoning parser writes its thinking inline (``<think> ...
</think> answer``, or ``... </think> answer`` when the chat template wrote the opening tag):
``inline_reasoning="auto"`` (the default) moves it to :attr:`Completion.reasoning` and leaves the
answer after the closing tag as the text, and a reply cut off inside an unclosed ``<think>`` has no
text ("": graded as an empty response, never read for an answer). ``inline_reasoning="opened"``
says the chat template always opens the thinking (DeepSeek-R1 distills without a reasoning parser),
so a reply without a closing tag is all unfinished thinking, even one cut off before it wrote any
tag; ``"off"`` takes the content as it stands (:func:`~catengine.inline_reasoning.split_inline_reasoning`).
A refusal the server reports apart (``message.refusal`` with ``content`` null) is
:attr:`Completion.refusal`, and the text is "".
"""

from __future__ import annotations

import html
import inspect
import json
import os
import random
import re
import threading
import time
import warnings
from typing import Mapping

import openai

from catengine.clients.base import Completion, EndpointError, InlineReasoning, split_inline_reasoning
from catengine.clients.budget import Budget, BudgetExceeded
from catengine.clients.retry import RetryPolicy, is_retryable_status, retry_after_seconds
from catengine.closing import Closing
from catengine.errors import CatEngineError

__all__ = ["ErrorReply", "MalformedReply", "MissingUsageWarning", "OpenAIChatClient", "parse_chat_completion"]

#: request fields the client sets itself; sampling may not override them
_RESERVED = frozenset({"messages", "model", "stream", "stream_options", "n", "max_tokens", "max_completion_tokens",
                       "extra_headers", "extra_query", "timeout", "tools", "tool_choice", "functions", "function_call"})
#: the longest piece of an error body quoted in a message
_BODY_CHARS = 300
#: finish reasons (lower case) that mean the reply stopped at the output cap: reported as "length"
LENGTH_REASONS = frozenset({"length", "max_tokens", "max_output_tokens", "max_completion_tokens", "max_length",
                            "model_length", "model_context_window_exceeded"})
#: finish reasons (lower case) of a generation the server ended itself: not the model's answer, retried
FAILED_REASONS = frozenset({"abort", "aborted", "error", "insufficient_system_resource"})
#: error codes / types that say an account's quota or credit is exhausted (a 429 not worth retrying)
_QUOTA = frozenset({"insufficient_quota"})
#: words of an error's type or code -> the HTTP status they stand for, when it gives no number
_ERROR_WORDS = (("rate_limit", 429), ("overloaded", 503), ("unavailable", 503), ("timeout", 504),
                ("server_error", 500), ("internal", 500), ("not_found", 404), ("authentication", 401),
                ("permission", 403), ("invalid_request", 400), ("context_length", 400))
_INLINE_MODES = ("auto", "opened", "off")


class MalformedReply(CatEngineError, ValueError):
    """A 200 reply that is not a chat completion (not JSON, an HTML page, no choices, no message)."""


class ErrorReply(MalformedReply):
    """A 200 reply that reports a failure instead of an answer: an error object (``{"error": {...}}``)
    or a generation the server ended itself (``finish_reason`` "abort", "error", ...).

    ``status``: the HTTP status the error stands for (from its ``code``; None when it names none);
    ``retryable``: whether another attempt may succeed; ``bounded``: an error that names no status,
    retried no more than a malformed reply; ``prompt_tokens`` / ``completion_tokens``: what the reply
    says it used (charged to a budget)."""

    def __init__(self, message: str, *, status: int | None = None, retryable: bool = True, bounded: bool = False,
                 prompt_tokens: int | None = None, completion_tokens: int | None = None):
        super().__init__(message)
        self.status, self.retryable, self.bounded = status, retryable, bounded
        self.prompt_tokens, self.completion_tokens = prompt_tokens, completion_tokens


class MissingUsageWarning(UserWarning):
    """An endpoint's replies carry no token usage: completion tokens (the CoT length of LaRT banks)
    are unknown."""


def _count(value) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0 else None


def _first_count(mapping: Mapping, *keys) -> int | None:
    for key in keys:
        value = _count(mapping.get(key))
        if value is not None:
            return value
    return None


def _dict(value) -> dict:
    return value if isinstance(value, dict) else {}


# ---------------------------------------------------------------------------- reading a reply body
def parse_chat_completion(body: bytes | str, *, inline_reasoning: InlineReasoning = "auto") -> dict:
    """The fields of a chat-completions reply body that a :class:`Completion` records: ``text``,
    ``reasoning``, ``refusal``, ``finish_reason``, ``prompt_tokens``, ``completion_tokens``,
    ``reasoning_tokens``, ``model`` (see the module docstring for how each is read). Raises
    :class:`ErrorReply` for a reply that reports a failure and :class:`MalformedReply` saying what is
    wrong with a body that is not a chat completion."""
    data = _decode(body)
    error = _error_object(data)
    if error is not None:
        raise _error_reply("the reply (HTTP 200) is an error object", error)
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices:
        hint = "" if choices is None or isinstance(choices, list) else f" ({type(choices).__name__})"
        raise MalformedReply(f"the reply has no choices{hint} (keys: {sorted(data)}); "
                             f"it begins {_snippet(body, 120)!r}")
    choice = choices[0]
    message = _dict(choice).get("message", _dict(choice).get("delta"))
    if not isinstance(message, dict) and isinstance(choice, dict) and isinstance(choice.get("text"), str):
        message = {"content": choice["text"]}  # a completions-style choice
    if not isinstance(message, dict):
        raise MalformedReply(f"the reply's first choice has no message (keys: {sorted(_dict(choice))})")
    text, reasoning, refusal = _message_parts(message, inline_reasoning)
    fields = {"text": text, "reasoning": reasoning, "refusal": refusal, **_usage(data.get("usage")),
              "model": data.get("model") if isinstance(data.get("model"), str) else ""}
    finish = choice.get("finish_reason")
    if isinstance(finish, dict):  # {"type": "length", ...}
        finish = finish.get("type")
    finish = finish.strip() if isinstance(finish, str) and finish.strip() else None
    if finish is not None and finish.lower() in FAILED_REASONS:
        detail = _dict(choice.get("error")) or _error_object(data) or {}
        raise _error_reply(f"the server ended the generation itself (finish_reason {finish!r}): the reply is not "
                           "the model's answer", detail, fields=fields)
    fields["finish_reason"] = "length" if finish is not None and finish.lower() in LENGTH_REASONS else finish
    return fields


def _decode(body: bytes | str) -> dict:
    """The JSON object of a reply body: a JSON object, a JSON object followed by an event stream's
    ``data: [DONE]``, or an event stream of chunks (put together)."""
    try:
        text = body.decode("utf-8") if isinstance(body, bytes) else str(body)
    except UnicodeDecodeError as exc:
        raise MalformedReply(f"the reply is not UTF-8 text ({exc}); it begins {_snippet(body)!r}") from None
    stripped = text.strip()
    if stripped.startswith(("data:", "event:", ":")):
        return _from_event_stream(stripped)
    try:
        data, end = json.JSONDecoder().raw_decode(stripped)
        rest = stripped[end:].strip()
        if rest and rest.replace("data:", "").strip() != "[DONE]":
            raise ValueError(f"extra data after the JSON value: {rest[:40]!r}")
    except ValueError as exc:
        if _is_html(stripped):
            raise MalformedReply(f"the reply is {_html_summary(stripped)}, not a chat completion (is base_url the "
                                 "API's? it usually ends in /v1)") from None
        raise MalformedReply(f"the reply is not valid JSON ({exc}); it begins {_snippet(body)!r}") from None
    if not isinstance(data, dict):
        raise MalformedReply(f"the reply is JSON {type(data).__name__}, not an object")
    return data


def _from_event_stream(text: str) -> dict:
    """One chat completion from the ``data:`` chunks of an event stream (content and reasoning
    deltas joined, the last finish reason, usage and model)."""
    content, reasoning, refusal = [], [], []
    merged: dict = {"choices": [{"message": {}, "finish_reason": None}]}
    seen = False
    for line in text.splitlines():
        if not line.startswith("data:") or line[5:].strip() in ("", "[DONE]"):
            continue
        try:
            chunk = json.loads(line[5:])
        except ValueError:
            raise MalformedReply(f"the reply is an event stream with a chunk that is not JSON: "
                                 f"{_snippet(line)!r}") from None
        if not isinstance(chunk, dict):
            continue
        if _error_object(chunk) is not None:
            return chunk
        seen = True
        for key in ("model", "usage"):
            if chunk.get(key) is not None:
                merged[key] = chunk[key]
        choice = (chunk.get("choices") or [None])[0]
        if not isinstance(choice, dict):
            continue
        delta = _dict(choice.get("delta") or choice.get("message"))
        content.append(_part_text(delta.get("content")))
        reasoning.append(next((r for r in map(delta.get, ("reasoning_content", "reasoning", "thinking"))
                               if isinstance(r, str)), ""))
        refusal.append(_part_text(delta.get("refusal")))
        if choice.get("finish_reason") is not None:
            merged["choices"][0]["finish_reason"] = choice["finish_reason"]
        if choice.get("error") is not None:
            merged["choices"][0]["error"] = choice["error"]
    if not seen:
        raise MalformedReply(f"the reply is an event stream without a chat-completion chunk: {_snippet(text)!r}")
    merged["choices"][0]["message"] = {"content": "".join(content), "reasoning_content": "".join(reasoning) or None,
                                       "refusal": "".join(refusal) or None}
    return merged


def _message_parts(message: dict, inline_reasoning: InlineReasoning) -> tuple[str, str | None, str | None]:
    """(final text, reasoning, refusal) of a reply's message."""
    content = message.get("content")
    reasoning = [message.get(key) for key in ("reasoning_content", "reasoning", "thinking")]
    refusal = message.get("refusal") if isinstance(message.get("refusal"), str) else None
    if isinstance(content, list):  # content parts: text, thinking, refusal
        texts = []
        for part in content:
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, dict) and part.get("type") in ("thinking", "reasoning"):
                reasoning.append(_part_text(part.get("thinking", part.get("reasoning", part.get("text")))))
            elif isinstance(part, dict) and part.get("type") == "refusal":
                refusal = refusal or _part_text(part.get("refusal"))
            elif isinstance(part, dict):
                texts.append(_part_text(part.get("text")))
        content = "".join(texts)
    if content is not None and not isinstance(content, str):
        raise MalformedReply(f"the reply's message content is {type(content).__name__}, not text")
    details = message.get("reasoning_details")
    if not any(isinstance(r, str) and r.strip() for r in reasoning) and isinstance(details, list):
        reasoning += [_part_text(d.get("text", d.get("summary"))) for d in details if isinstance(d, dict)]
    text, inline = split_inline_reasoning(content or "", inline_reasoning)
    parts = [r.strip() for r in (*reasoning, inline) if isinstance(r, str) and r.strip()]
    return text, "\n\n".join(dict.fromkeys(parts)) or None, refusal or None


def _part_text(value) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "".join(_part_text(v.get("text") if isinstance(v, dict) else v) for v in value)
    return ""


def _usage(usage) -> dict:
    """prompt, completion (reasoning included) and reasoning tokens of a reply's ``usage``."""
    usage = _dict(usage)
    details = _dict(usage.get("completion_tokens_details")) or _dict(usage.get("output_tokens_details"))
    prompt = _first_count(usage, "prompt_tokens", "input_tokens")
    completion = _first_count(usage, "completion_tokens", "output_tokens")
    reasoning = _first_count(details, "reasoning_tokens")
    reasoning = reasoning if reasoning is not None else _first_count(usage, "reasoning_tokens")
    total = _first_count(usage, "total_tokens")
    if completion is None and total is not None and prompt is not None and total >= prompt:
        completion = total - prompt
    elif completion is not None and reasoning:
        # reasoning counted outside completion_tokens (xAI, some Gemini proxies): add it back
        outside = total is not None and prompt is not None and total == prompt + completion + reasoning
        if reasoning > completion or outside:
            completion += reasoning
    return {"prompt_tokens": prompt, "completion_tokens": completion, "reasoning_tokens": reasoning}


# ---------------------------------------------------------------------------- errors
def _error_object(data: dict) -> dict | None:
    """The error a reply body reports instead of choices (``{"error": ...}`` or vLLM's
    ``{"object": "error", ...}``), or None."""
    if data.get("choices"):
        return None
    error = data.get("error")
    if error is None and data.get("object") == "error":
        error = data
    if error is None or error is False:
        return None
    return error if isinstance(error, dict) else {"message": str(error)}


def _error_status(error: dict) -> int | None:
    """The HTTP status an error object stands for: its numeric ``code`` / ``status``, else the words
    of its ``type`` / ``code`` ("rate_limit_exceeded" -> 429, "server_error" -> 500, ...)."""
    for key in ("code", "status", "status_code", "http_status"):
        value = error.get(key)
        if isinstance(value, str) and value.strip().isdigit():
            value = int(value)
        if isinstance(value, int) and not isinstance(value, bool) and 400 <= value <= 599:
            return value
    words = " ".join(str(error.get(key) or "") for key in ("type", "code", "status")).lower()
    return next((status for word, status in _ERROR_WORDS if word in words), None)


def _quota_exhausted(error: dict | None) -> bool:
    return bool(error) and any(str(error.get(key) or "").lower() in _QUOTA for key in ("type", "code"))


def _error_reply(what: str, error: dict, *, fields: dict | None = None) -> ErrorReply:
    status = _error_status(error) if error else None
    message = error.get("message") if error else None
    said = ", ".join(f"{k} {error[k]!r}" for k in ("code", "type") if error and error.get(k) not in (None, ""))
    text = what + (f": {_snippet(message)}" if message else "") + (f" ({said})" if said else "")
    if _quota_exhausted(error):
        retryable, text = False, text + "; the account's quota is exhausted"
    else:
        retryable = status is None or is_retryable_status(status)
    generation = fields is not None  # a generation the server ended: a server error, whatever it names
    fields = fields or {}
    return ErrorReply(text, status=status, retryable=retryable, bounded=status is None and not generation,
                      prompt_tokens=fields.get("prompt_tokens"), completion_tokens=fields.get("completion_tokens"))


def _http_error(status: int, body: str) -> tuple[str, bool]:
    """(what an HTTP error reply says, whether it is worth another attempt)."""
    try:
        data = json.loads(body)
    except ValueError:
        data = None
    error = _error_object(data) if isinstance(data, dict) else None
    said = _html_summary(body) if _is_html(body) else _snippet(body)
    if status == 429 and _quota_exhausted(error):
        return f"HTTP 429: {said} (not retried: the account's quota is exhausted)", False
    if not is_retryable_status(status):
        return f"HTTP {status}: {said} (not retried)", False
    return f"HTTP {status}: {said}", True


def _is_html(text: str) -> bool:
    head = text.lstrip()[:200].lower()
    return head.startswith("<") and ("<html" in head or "<!doctype" in head or "<head" in head or "<body" in head)


def _html_summary(text: str) -> str:
    """An HTML page in a line: "an HTML page 'TITLE' (its text)"."""
    title = re.search(r"<title[^>]*>(.*?)</title>", text, flags=re.I | re.S)
    body = re.sub(r"<(script|style)[^>]*>.*?</\1>", " ", text, flags=re.I | re.S)
    words = html.unescape(re.sub(r"<[^>]+>", " ", body))
    name = f" {html.unescape(title.group(1)).strip()!r}" if title and title.group(1).strip() else ""
    return f"an HTML page{name} ({_snippet(words, 200)})"


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
    ``inline_reasoning``: how reasoning written inline in the content is read (``"auto"``,
    ``"opened"``, ``"off"``; see the module docstring); ``jitter_seed``: seeds the backoff's jitter
    (None: fresh randomness).
    """

    def __init__(self, model: str, *, base_url: str | None = None, api_key_env: str = "OPENAI_API_KEY",
                 timeout: float = 600.0, max_retries: int = 5, malformed_retries: int = 2,
                 backoff_base: float = 0.5, backoff_max: float = 30.0, retry_after_max: float = 60.0,
                 retry: RetryPolicy | None = None, sampling: Mapping | None = None,
                 system_prompt: str | None = None, budget: Budget | None = None,
                 max_tokens_param: str = "max_tokens", inline_reasoning: InlineReasoning = "auto",
                 jitter_seed: int | None = None):
        if not isinstance(model, str) or not model:
            raise ValueError(f"model must be a non-empty model name, got {model!r}")
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
            raise ValueError(f"timeout must be a number of seconds > 0, got {timeout!r}")
        if max_tokens_param not in ("max_tokens", "max_completion_tokens"):
            raise ValueError(f"max_tokens_param must be 'max_tokens' or 'max_completion_tokens', got {max_tokens_param!r}")
        if inline_reasoning not in _INLINE_MODES:
            raise ValueError(f"inline_reasoning must be one of {_INLINE_MODES}, got {inline_reasoning!r}")
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
        self.inline_reasoning = inline_reasoning
        self._client = openai.OpenAI(base_url=base_url, api_key=api_key, timeout=self.timeout, max_retries=0)
        self.base_url = str(self._client.base_url).rstrip("/")
        self.endpoint = f"{self.base_url}/chat/completions"
        self._create = self._client.chat.completions.with_raw_response.create
        self.sampling = dict(sampling or {})
        self._kwargs, self._extra_body = self._split_sampling(self.sampling)
        self._rng = random.Random(jitter_seed)
        self._rng_lock = threading.Lock()
        self._warned_usage = False

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
                body, headers = raw.http_response.content, raw.http_response.headers
                latency = time.perf_counter() - started
                fields = parse_chat_completion(body, inline_reasoning=self.inline_reasoning)
            except openai.APIStatusError as exc:
                self._settle(reservation, replied=False)
                error, retryable = _http_error(exc.status_code, exc.response.text if exc.response is not None
                                               else exc.message)
                if not retryable:
                    raise EndpointError(self.endpoint, error, attempts) from None
                retry_after = retry_after_seconds(exc.response.headers if exc.response is not None else None)
            except openai.APITimeoutError:
                self._settle(reservation, replied=False)
                error = f"no reply within the timeout of {self.timeout:g} s"
            except openai.APIConnectionError as exc:
                self._settle(reservation, replied=False)
                cause = exc.__cause__ or exc.__context__
                error = f"connection failed ({type(cause).__name__}: {cause})" if cause else f"connection failed ({exc})"
            except ErrorReply as exc:
                self._settle(reservation, exc.prompt_tokens, exc.completion_tokens,
                             replied=exc.completion_tokens is not None)
                error = str(exc)
                if not exc.retryable:
                    raise EndpointError(self.endpoint, error + " (not retried)", attempts) from None
                malformed += exc.bounded
                if malformed > self.retry.malformed_retries:
                    raise EndpointError(self.endpoint, error, attempts) from None
                retry_after = retry_after_seconds(headers)
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
                return self._completion(fields, max_tokens, latency, attempts)
            if attempts > self.retry.max_retries:
                raise EndpointError(self.endpoint, error, attempts)
            with self._rng_lock:
                wait = self.retry.delay(attempts, retry_after, self._rng)
            time.sleep(wait)

    def _completion(self, fields: dict, max_tokens: int | None, latency: float, attempts: int) -> Completion:
        finish, tokens = fields["finish_reason"], fields["completion_tokens"]
        if finish is None and max_tokens is not None and tokens is not None and tokens >= max_tokens:
            finish = "length"  # no finish reason, the output cap reached: stopped at the cap
        if tokens is None and not self._warned_usage:
            self._warned_usage = True
            warnings.warn(f"{self.endpoint} reports no token usage: completion tokens (the CoT length of LaRT banks) "
                          "are unknown and recorded as such", MissingUsageWarning, stacklevel=3)
        return Completion(text=fields["text"], finish_reason=finish, completion_tokens=tokens,
                          prompt_tokens=fields["prompt_tokens"], reasoning_tokens=fields["reasoning_tokens"],
                          latency_s=latency, attempts=attempts, model=fields["model"] or self.model,
                          request=self.request_settings(max_tokens), reasoning=fields["reasoning"],
                          refusal=fields["refusal"])

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
