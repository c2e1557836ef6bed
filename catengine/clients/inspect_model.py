"""A model client over any Inspect AI model (needs the ``[inspect]`` extra).

    from catengine.clients import InspectModelClient

    client = InspectModelClient("openai/gpt-4o-mini", sampling={"temperature": 0.5, "seed": 0})
    client = InspectModelClient("vllm/Qwen/Qwen2.5-7B-Instruct")        # any provider Inspect knows
    client = InspectModelClient("mockllm/model")                         # offline, for trying things out
    completion = client.complete(bank.prompt("math500/0"), max_tokens=10240)

The model comes from ``inspect_ai.model.get_model(name, ...)`` (or pass a ``Model``); each call is one
``Model.generate`` of the prompt as the user message (after an optional system message), with
``max_tokens`` and the sampling parameters in its ``GenerateConfig`` (parameters ``GenerateConfig``
does not know go in its ``extra_body``). Inspect's own retry, timeout and connection limits stay in
charge (``max_retries`` and ``timeout`` set them); when ``generate`` still fails, the client raises
:class:`~catengine.clients.base.EndpointError` naming the model and the error.

The reply maps to a :class:`Completion`: ``text`` the output's ``completion`` with any reasoning
still inline in it moved to ``reasoning`` (Inspect takes a complete ``<think> ... </think>`` block out
itself; a block the chat template opened, or one cut off before its closing tag, is read as
:func:`~catengine.inline_reasoning.split_inline_reasoning` reads it with ``inline_reasoning``, default
"auto"); ``reasoning`` the output's reasoning parts; ``finish_reason``
from Inspect's ``stop_reason`` ("max_tokens" and "model_length", where the output was cut, become
"length"; "stop", "content_filter", "tool_calls" and "unknown" stay); ``completion_tokens``,
``prompt_tokens`` and ``reasoning_tokens`` from its ``usage`` (``output_tokens``, the input tokens
with cache reads and writes, ``reasoning_tokens``). Thread-safe: the calls of every thread run on
one event loop that the client keeps in a background thread.

Inspect's mock model (``mockllm/model``) counts the tokens of an output that reports no usage with
tiktoken, which downloads tokenizer files; for that model the client counts offline instead (about
four characters per token).
"""

from __future__ import annotations

import asyncio
import inspect
import math
import threading
import time
from typing import Mapping

from catengine.clients.base import Completion, EndpointError, InlineReasoning, split_inline_reasoning
from catengine.clients.budget import Budget
from catengine.closing import Closing

__all__ = ["InspectModelClient", "finish_reason_of"]

#: Inspect stop reasons -> chat-completions finish reasons
_FINISH = {"max_tokens": "length", "model_length": "length"}


def finish_reason_of(stop_reason: str | None) -> str | None:
    """The chat-completions ``finish_reason`` of an Inspect ``stop_reason`` ("max_tokens" and
    "model_length" -> "length"; any other is kept)."""
    return None if stop_reason is None else _FINISH.get(stop_reason, stop_reason)


def _offline_text_tokens(text: str) -> int:
    """A network-free token estimate (about 4 characters per token) for Inspect's mock model."""
    return max(1, math.ceil(len(text) / 4))


async def _offline_text_tokens_async(text: str) -> int:
    return _offline_text_tokens(text)


def _offline_safe(model) -> None:
    """Give Inspect's mock model a network-free token counter (it would download tiktoken's files)."""
    try:
        from inspect_ai.model._model import ModelAPI
        from inspect_ai.model._providers.mockllm import MockLLM
    except ImportError:  # pragma: no cover - a future inspect_ai that moved them: nothing to adapt
        return
    api = getattr(model, "api", None)
    if (isinstance(api, MockLLM) and type(api).count_text_tokens is ModelAPI.count_text_tokens
            and "count_text_tokens" not in vars(api)):
        # Inspect's counter is a coroutine function in recent releases, a plain function in older ones
        async_counter = inspect.iscoroutinefunction(ModelAPI.count_text_tokens)
        api.count_text_tokens = _offline_text_tokens_async if async_counter else _offline_text_tokens


class InspectModelClient(Closing):
    """The :class:`~catengine.clients.base.ModelClient` of an Inspect AI model (see the module docstring).

    ``model``: a model name (``"provider/model"``) or an ``inspect_ai.model.Model``; ``sampling``:
    ``GenerateConfig`` fields (``temperature``, ``top_p``, ``seed``, ``top_k``, ...; others go in
    ``extra_body``); ``system_prompt``: a system message before each prompt; ``timeout`` /
    ``max_retries``: Inspect's per-request timeout and retries (None: Inspect's defaults);
    ``base_url`` / ``api_key`` / ``model_args``: passed to ``get_model``; ``budget``: a
    :class:`~catengine.clients.budget.Budget` checked before every call; ``inline_reasoning``: how
    reasoning left inline in the output is read ("auto", "opened", "off").
    """

    def __init__(self, model, *, sampling: Mapping | None = None, system_prompt: str | None = None,
                 timeout: float | None = None, max_retries: int | None = None, base_url: str | None = None,
                 api_key: str | None = None, model_args: Mapping | None = None, budget: Budget | None = None,
                 inline_reasoning: InlineReasoning = "auto"):
        try:
            from inspect_ai.model import GenerateConfig, Model, get_model
        except ImportError as exc:  # pragma: no cover - the extra is installed in the test environment
            raise ImportError("InspectModelClient needs Inspect AI: pip install 'catengine[inspect]'") from exc
        if budget is not None and not isinstance(budget, Budget):
            raise TypeError(f"budget must be a catengine.clients.Budget, got {type(budget).__name__}")
        if inline_reasoning not in ("auto", "opened", "off"):
            raise ValueError(f"inline_reasoning must be 'auto', 'opened' or 'off', got {inline_reasoning!r}")
        self.inline_reasoning = inline_reasoning
        if system_prompt is not None and not isinstance(system_prompt, str):
            raise TypeError(f"system_prompt must be a string or None, got {type(system_prompt).__name__}")
        self.sampling = dict(sampling or {})
        fields = set(GenerateConfig.model_fields)
        known = {k: v for k, v in self.sampling.items() if k in fields and k != "max_tokens"}
        extra = {k: v for k, v in self.sampling.items() if k not in fields}
        if "max_tokens" in self.sampling:
            raise ValueError("sampling may not set 'max_tokens': it is an argument of complete()")
        if extra:
            known["extra_body"] = {**dict(known.get("extra_body") or {}), **extra}
        if timeout is not None:
            known["timeout"] = timeout
        if max_retries is not None:
            known["max_retries"] = max_retries
        self._config = GenerateConfig(**known)
        self._GenerateConfig = GenerateConfig
        if isinstance(model, Model):
            self._model = model
        elif isinstance(model, str) and model:
            self._model = get_model(model, base_url=base_url, api_key=api_key, memoize=False, **dict(model_args or {}))
        else:
            raise ValueError(f"model must be an Inspect model name ('provider/model') or Model, got {model!r}")
        _offline_safe(self._model)
        self.model = str(self._model)
        api_base = getattr(self._model.api, "base_url", None)
        self.endpoint = f"inspect:{self.model}" + (f" ({api_base})" if api_base else "")
        self.system_prompt = system_prompt
        self.budget = budget
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="catengine-inspect-client", daemon=True)
        self._thread.start()

    def request_settings(self, max_tokens: int | None) -> dict:
        """The settings a request records: model, max_tokens, the sampling parameters, the system prompt."""
        settings = {"model": self.model, "max_tokens": max_tokens, **self.sampling}
        if self.system_prompt is not None:
            settings["system_prompt"] = self.system_prompt
        return settings

    async def _generate(self, prompt: str, config):
        from inspect_ai.model import ChatMessageSystem, ChatMessageUser

        messages = [ChatMessageUser(content=prompt)]
        if self.system_prompt is not None:
            messages.insert(0, ChatMessageSystem(content=self.system_prompt))
        return await self._model.generate(messages, config=config)

    def complete(self, prompt: str, *, max_tokens: int | None = None) -> Completion:
        """Ask ``prompt`` and return the reply; raises :class:`EndpointError` when Inspect's
        ``generate`` fails (after its own retries)."""
        if not isinstance(prompt, str):
            raise TypeError(f"prompt must be a string, got {type(prompt).__name__}")
        if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1):
            raise ValueError(f"max_tokens must be an integer >= 1 or None, got {max_tokens!r}")
        if self._loop.is_closed():
            raise RuntimeError("this InspectModelClient is closed")
        config = self._config.merge(self._GenerateConfig(max_tokens=max_tokens)) if max_tokens else self._config
        text = prompt if self.system_prompt is None else self.system_prompt + prompt
        reservation = self.budget.reserve(text, max_tokens) if self.budget is not None else None
        started = time.perf_counter()
        try:
            output = asyncio.run_coroutine_threadsafe(self._generate(prompt, config), self._loop).result()
        except Exception as exc:  # noqa: BLE001 - whatever the provider raised, named in the error
            if reservation is not None:
                self.budget.settle(reservation, replied=False)
            raise EndpointError(self.endpoint, f"{type(exc).__name__}: {exc} (after Inspect's own retries)") from exc
        latency = time.perf_counter() - started
        usage = output.usage
        prompt_tokens = completion_tokens = reasoning_tokens = None
        if usage is not None:
            completion_tokens = int(usage.output_tokens)
            prompt_tokens = int(usage.input_tokens + (usage.input_tokens_cache_read or 0)
                                + (usage.input_tokens_cache_write or 0))
            reasoning_tokens = None if usage.reasoning_tokens is None else int(usage.reasoning_tokens)
        if reservation is not None:
            self.budget.settle(reservation, prompt_tokens, completion_tokens)
        stop = output.stop_reason if output.choices else None
        reasoning = None
        if output.choices:
            from inspect_ai.model import ContentReasoning

            content = output.message.content
            if isinstance(content, list):
                parts = [c.reasoning for c in content if isinstance(c, ContentReasoning)]
                reasoning = "\n".join(parts) if parts else None
        answer, inline = split_inline_reasoning(output.completion or "", self.inline_reasoning)
        if inline is not None:
            reasoning = inline if reasoning is None else f"{reasoning}\n\n{inline}"
        return Completion(text=answer, finish_reason=finish_reason_of(stop),
                          completion_tokens=completion_tokens, prompt_tokens=prompt_tokens,
                          reasoning_tokens=reasoning_tokens, latency_s=latency, attempts=1,
                          model=output.model or self.model, request=self.request_settings(max_tokens),
                          reasoning=reasoning)

    def close(self) -> None:
        """Stop the client's event loop (the client cannot be used afterwards)."""
        if not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)
            self._loop.close()

    def __repr__(self) -> str:
        return f"InspectModelClient({self.model!r})"
