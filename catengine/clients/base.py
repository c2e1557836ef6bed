"""The model-client role: put one prompt to an LLM and return what it answered, with its cost.

One contract for every client (an OpenAI-compatible endpoint, an Inspect AI model, a test double):
``complete(prompt, *, max_tokens) -> Completion``. A client retries what is worth retrying
(rate limits, server errors, timeouts) itself and raises :class:`EndpointError` once it gives up,
naming the endpoint and the last error; a reply it received, however malformed, empty or truncated,
is returned as a :class:`Completion` (the grader decides what it is worth), never dropped. A reply
that is not the model's answer (an error reported in a 200 reply, a generation the server aborted)
is a failure of the endpoint, not a completion.

:attr:`Completion.text` is what a grader reads: the final answer alone. A reasoning model's thinking,
whether the server returns it apart (``reasoning_content``) or inline before the answer
(``<think> ... </think> answer``, :func:`catengine.inline_reasoning.split_inline_reasoning`), is kept in
:attr:`Completion.reasoning`; a reply that stopped inside its thinking has no final answer (``text``
is ""), so no answer is read from unfinished thinking.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Protocol, runtime_checkable

from catengine.errors import CatEngineError
from catengine.inline_reasoning import THINK_TAGS, InlineReasoning, split_inline_reasoning  # noqa: F401 (part of the clients' API)


@dataclass(frozen=True)
class Completion:
    """One reply of an LLM to one prompt.

    ``text`` is the final answer's content, without the reasoning before it ("" when the server
    sent none, or when the reply stopped inside its reasoning); ``finish_reason`` as the server
    reported it ("stop", "eos", ...; None when it reported none), except that every name of a stop at
    the output cap ("length", "max_tokens", ...) is "length" (the CoT length is censored);
    ``completion_tokens`` the output tokens the server counted (reasoning included: the CoT length of
    LaRT banks; None when it reported no usage), ``reasoning_tokens`` the part it reports as reasoning
    (None when it reports none); ``latency_s`` the wall time of the successful request; ``attempts``
    how many requests it took; ``request`` the settings sent (model, max_tokens, sampling
    parameters); ``reasoning`` the reasoning text, returned apart from the answer
    (``reasoning_content``, ``reasoning``) or inline before it (``<think> ... </think>``), else None;
    ``refusal`` the model's refusal when the server reports one apart from the content (OpenAI's
    ``message.refusal``; the content, and so ``text``, is then usually empty), else None.
    """

    text: str
    finish_reason: str | None
    completion_tokens: int | None
    prompt_tokens: int | None = None
    reasoning_tokens: int | None = None
    latency_s: float = 0.0
    attempts: int = 1
    model: str = ""
    request: Mapping = field(default_factory=dict)
    reasoning: str | None = None
    refusal: str | None = None

    @property
    def truncated(self) -> bool:
        """The reply stopped at the output cap (its CoT length is a lower bound)."""
        return self.finish_reason == "length"

    def as_record(self) -> dict:
        """A JSON-ready dict of every field (what a run's log stores)."""
        return {"text": self.text, "finish_reason": self.finish_reason, "completion_tokens": self.completion_tokens,
                "prompt_tokens": self.prompt_tokens, "reasoning_tokens": self.reasoning_tokens,
                "latency_s": round(float(self.latency_s), 4), "attempts": self.attempts, "model": self.model,
                "request": dict(self.request), "reasoning": self.reasoning, "refusal": self.refusal}


class EndpointError(CatEngineError, RuntimeError):
    """A model endpoint failed for good (after its retries): names the endpoint, the last error and
    how many attempts were made."""

    def __init__(self, endpoint: str, last_error: str, attempts: int = 1):
        self.endpoint, self.last_error, self.attempts = endpoint, last_error, attempts
        super().__init__(f"{endpoint}: gave up after {attempts} attempt(s); last error: {last_error}")


@runtime_checkable
class ModelClient(Protocol):
    """The role: ``complete(prompt, *, max_tokens) -> Completion``, safe to call from several threads
    at once; ``endpoint`` names where requests go (for messages), ``model`` the model asked. A client
    that takes reasoning out of the reply's text says how in ``inline_reasoning`` (a run's log records
    it; a client without it is taken to grade its text as it stands, "off")."""

    endpoint: str
    model: str

    def complete(self, prompt: str, *, max_tokens: int | None = None) -> Completion: ...
