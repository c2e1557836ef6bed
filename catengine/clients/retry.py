"""When a model client tries a request again, and how long it waits first.

What is retried: a rate limit (HTTP 429), a request timeout or conflict (408, 409), a server error
(5xx), a request that timed out on the client's side and a connection that failed or dropped; a
malformed reply (not JSON, no choices) a smaller number of times. Any other 4xx (a bad request, an
unknown model, a missing key) is the caller's to fix and is never retried.

The wait before retry ``k`` (1, 2, ...) is "full jitter": uniform on [0, min(backoff_max,
backoff_base * 2 ** (k - 1))], so that many clients that failed together do not retry together. A
``Retry-After`` the server sent (seconds, an HTTP date, or ``retry-after-ms``) is honoured: the wait
is at least that long, capped at ``retry_after_max``.
"""

from __future__ import annotations

import email.utils
import math
import random
import time
from dataclasses import dataclass
from typing import Mapping

__all__ = ["RETRY_STATUSES", "RetryPolicy", "is_retryable_status", "retry_after_seconds"]

#: HTTP statuses below 500 that are worth another attempt
RETRY_STATUSES = frozenset({408, 409, 429})


def is_retryable_status(status: int) -> bool:
    """Whether a reply with HTTP ``status`` is worth another attempt (408, 409, 429 and every 5xx)."""
    return status in RETRY_STATUSES or status >= 500


def retry_after_seconds(headers: Mapping[str, str] | None, *, now: float | None = None) -> float | None:
    """The wait a reply's headers ask for, in seconds (``retry-after-ms``, else ``Retry-After`` as
    seconds or as an HTTP date), or None when they ask for none or it cannot be read."""
    if not headers:
        return None
    lower = {str(k).lower(): v for k, v in headers.items()}
    value = lower.get("retry-after-ms")
    if value is not None:
        try:
            ms = float(value)
        except ValueError:
            ms = math.nan
        if math.isfinite(ms) and ms >= 0:
            return ms / 1000.0
    value = lower.get("retry-after")
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when is None:
            return None
        seconds = when.timestamp() - (time.time() if now is None else now)
        return max(0.0, seconds)
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


@dataclass(frozen=True)
class RetryPolicy:
    """How many times a client tries and how long it waits in between (see the module docstring).

    ``max_retries``: retries after the first attempt of a request (so at most ``max_retries + 1``
    attempts); ``malformed_retries``: of those, how many may follow a malformed reply;
    ``backoff_base`` / ``backoff_max``: the exponential backoff's first ceiling and its cap (seconds);
    ``retry_after_max``: the longest ``Retry-After`` honoured (a longer one is cut to this).
    """

    max_retries: int = 5
    malformed_retries: int = 2
    backoff_base: float = 0.5
    backoff_max: float = 30.0
    retry_after_max: float = 60.0

    def __post_init__(self):
        for name in ("max_retries", "malformed_retries"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be an integer >= 0, got {value!r}")
        for name in ("backoff_base", "backoff_max", "retry_after_max"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise ValueError(f"{name} must be a finite number of seconds >= 0, got {value!r}")

    def backoff(self, retry: int, rng: random.Random | None = None) -> float:
        """The jittered wait before retry number ``retry`` (1, 2, ...), ignoring any Retry-After."""
        ceiling = min(self.backoff_max, self.backoff_base * 2.0 ** (max(retry, 1) - 1))
        return (rng or random).uniform(0.0, ceiling)

    def delay(self, retry: int, retry_after: float | None = None, rng: random.Random | None = None) -> float:
        """The wait before retry number ``retry``: the jittered backoff, and at least the server's
        ``retry_after`` (capped at ``retry_after_max``) when it sent one."""
        wait = self.backoff(retry, rng)
        if retry_after is not None:
            wait = max(wait, min(float(retry_after), self.retry_after_max))
        return wait

    def as_record(self) -> dict:
        return {"max_retries": self.max_retries, "malformed_retries": self.malformed_retries,
                "backoff_base": self.backoff_base, "backoff_max": self.backoff_max,
                "retry_after_max": self.retry_after_max}
