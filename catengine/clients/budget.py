"""Caps on what a run may spend: requests, completion tokens and money, checked before each request.

    budget = Budget(max_requests=2000, max_completion_tokens=2_000_000, max_cost_usd=5.0,
                    usd_per_million_input=0.15, usd_per_million_output=0.60)
    client = OpenAIChatClient("my-model", base_url=URL, budget=budget)
    ...
    budget.spent          # BudgetSpent(requests=..., prompt_tokens=..., completion_tokens=..., cost_usd=...)

A client calls :meth:`Budget.reserve` before every HTTP request it makes (retries included: each is a
request the endpoint counts) and :meth:`Budget.settle` when the reply is in. A reservation holds the
request's worst case until it is settled: one request, ``max_tokens`` completion tokens (the reply
cannot be longer) and their price, plus the prompt's price at an estimate of its tokens (one per
three characters, plus a few for the chat template) until the server reports the count. A request
whose worst case would take a cap past its limit, counting what is spent and what the requests in
flight hold, is refused with :class:`BudgetExceeded` before it is sent, so the completion-token and
request caps are never exceeded; the money cap is exceeded only if a prompt's true token count is
above its estimate. Without ``max_tokens`` a request's length is unknown: it is refused only once
the spent amount has reached the cap. A reply whose usage the server does not report is charged its
reservation (the worst case). Thread-safe: one budget can be shared by several clients and threads.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass

from catengine.errors import CatEngineError

__all__ = ["Budget", "BudgetExceeded", "BudgetSpent", "Reservation", "estimate_prompt_tokens"]

#: tokens a chat template adds around a prompt (role markers), counted in the estimate
TEMPLATE_TOKENS = 16


def estimate_prompt_tokens(text: str) -> int:
    """A generous estimate of the prompt tokens of ``text`` (one per three characters, plus the chat
    template's markers): what a reservation holds until the server reports the count."""
    return math.ceil(len(text) / 3) + TEMPLATE_TOKENS


@dataclass(frozen=True)
class BudgetSpent:
    """What has been spent: HTTP requests sent (retries included), tokens the server reported, and
    their price in USD."""

    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0

    def as_record(self) -> dict:
        return {"requests": self.requests, "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens, "cost_usd": round(self.cost_usd, 6)}

    def __str__(self) -> str:
        return (f"{self.requests:,} request(s), {self.prompt_tokens:,} prompt and {self.completion_tokens:,} "
                f"completion tokens, ${self.cost_usd:,.4f}")


class BudgetExceeded(CatEngineError):
    """A request was refused because it could take a cap of the :class:`Budget` past its limit.

    ``cap`` names the cap ("requests", "completion_tokens" or "cost_usd"), ``limit`` its value,
    ``spent`` what had been spent (:class:`BudgetSpent`) when the request was refused."""

    def __init__(self, cap: str, limit: float, spent: BudgetSpent, detail: str = ""):
        self.cap, self.limit, self.spent = cap, limit, spent
        names = {"requests": "request cap", "completion_tokens": "completion-token cap", "cost_usd": "spend cap"}
        shown = f"${limit:,.4f}" if cap == "cost_usd" else f"{limit:,}"
        super().__init__(f"budget: the {names.get(cap, cap)} of {shown} would be exceeded{detail}; "
                         f"spent so far: {spent}")


def _refuse_beyond(cap: str, limit, held, request, spent: BudgetSpent, detail) -> None:
    """Raise :class:`BudgetExceeded` when a request of up to ``request`` (None: of unknown size) on top of
    ``held`` would take the cap past ``limit`` (None: no cap); a request of unknown size only once
    ``held`` has reached it. ``detail()``: the message's account of the request."""
    if limit is None:
        return
    if request is None:
        if held >= limit:
            raise BudgetExceeded(cap, limit, spent)
    elif held + request > limit:
        raise BudgetExceeded(cap, limit, spent, detail())


@dataclass(frozen=True)
class Reservation:
    """The worst case one request holds until it is settled (see :meth:`Budget.reserve`)."""

    prompt_tokens: int
    completion_tokens: int | None
    cost_usd: float


class Budget:
    """Caps on requests, completion tokens and spend (USD at the given prices per million input and
    output tokens); ``None`` = no cap. See the module docstring for what a request reserves."""

    def __init__(self, *, max_requests: int | None = None, max_completion_tokens: int | None = None,
                 max_cost_usd: float | None = None, usd_per_million_input: float = 0.0,
                 usd_per_million_output: float = 0.0):
        for name, value in (("max_requests", max_requests), ("max_completion_tokens", max_completion_tokens)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise ValueError(f"{name} must be an integer >= 0 or None, got {value!r}")
        for name, value in (("max_cost_usd", max_cost_usd), ("usd_per_million_input", usd_per_million_input),
                            ("usd_per_million_output", usd_per_million_output)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                      or not math.isfinite(value) or value < 0):
                raise ValueError(f"{name} must be a finite number >= 0{' or None' if name == 'max_cost_usd' else ''}, "
                                 f"got {value!r}")
        if max_cost_usd is not None and usd_per_million_input == 0 and usd_per_million_output == 0:
            raise ValueError("max_cost_usd needs the prices: usd_per_million_input and/or usd_per_million_output")
        self.max_requests = max_requests
        self.max_completion_tokens = max_completion_tokens
        self.max_cost_usd = None if max_cost_usd is None else float(max_cost_usd)
        self.usd_per_million_input = float(usd_per_million_input)
        self.usd_per_million_output = float(usd_per_million_output)
        self._lock = threading.Lock()
        self._requests = 0
        self._prompt_tokens = 0
        self._completion_tokens = 0
        self._cost = 0.0
        self._held_tokens = 0       # completion tokens the requests in flight may still use
        self._held_cost = 0.0

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        """The price in USD of ``prompt_tokens`` input and ``completion_tokens`` output tokens."""
        return (prompt_tokens * self.usd_per_million_input + completion_tokens * self.usd_per_million_output) / 1e6

    @property
    def spent(self) -> BudgetSpent:
        """A snapshot of what has been spent (requests in flight count as requests, not yet as tokens)."""
        with self._lock:
            return self._spent()

    def _spent(self) -> BudgetSpent:
        return BudgetSpent(self._requests, self._prompt_tokens, self._completion_tokens, self._cost)

    def reserve(self, prompt: str | int, max_tokens: int | None) -> Reservation:
        """Hold the worst case of one request (``prompt``: its text, or its token count when known) or
        raise :class:`BudgetExceeded` naming the cap it would exceed. Counts the request at once."""
        prompt_tokens = prompt if isinstance(prompt, int) else estimate_prompt_tokens(prompt)
        worst_cost = self.cost(prompt_tokens, max_tokens or 0)
        with self._lock:
            spent = self._spent()
            _refuse_beyond("requests", self.max_requests, self._requests, 1, spent, lambda: "")
            _refuse_beyond("completion_tokens", self.max_completion_tokens, self._completion_tokens + self._held_tokens,
                           max_tokens, spent, lambda: f" by a request of up to {max_tokens:,} tokens "
                                                      f"({self._held_tokens:,} held by requests in flight)")
            _refuse_beyond("cost_usd", self.max_cost_usd, self._cost + self._held_cost,
                           None if max_tokens is None else worst_cost, spent,
                           lambda: f" by a request costing up to ${worst_cost:,.4f}")
            self._requests += 1
            self._held_tokens += max_tokens or 0
            self._held_cost += worst_cost
        return Reservation(prompt_tokens, max_tokens, worst_cost)

    def settle(self, reservation: Reservation, prompt_tokens: int | None = None,
               completion_tokens: int | None = None, *, replied: bool = True) -> None:
        """Release ``reservation`` and charge what the request used: the tokens the server reported
        (``replied=True``; a count it did not report is charged the reservation's worst case), or
        nothing but the request itself (``replied=False``: an error reply, a malformed reply, a timeout,
        no connection)."""
        with self._lock:
            self._held_tokens -= reservation.completion_tokens or 0
            self._held_cost -= reservation.cost_usd
            if not replied:
                return
            p = reservation.prompt_tokens if prompt_tokens is None else int(prompt_tokens)
            c = (reservation.completion_tokens or 0) if completion_tokens is None else int(completion_tokens)
            self._prompt_tokens += p
            self._completion_tokens += c
            self._cost += self.cost(p, c)

    def as_record(self) -> dict:
        """The caps, the prices and what was spent (JSON-ready)."""
        return {"max_requests": self.max_requests, "max_completion_tokens": self.max_completion_tokens,
                "max_cost_usd": self.max_cost_usd, "usd_per_million_input": self.usd_per_million_input,
                "usd_per_million_output": self.usd_per_million_output, "spent": self.spent.as_record()}

    def __repr__(self) -> str:
        return (f"Budget(max_requests={self.max_requests}, max_completion_tokens={self.max_completion_tokens}, "
                f"max_cost_usd={self.max_cost_usd}; spent {self.spent})")
