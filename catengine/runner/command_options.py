"""What ``catengine run`` (one model or two) and ``catengine regrade`` read from their options: the
bank with any attached content, the sampling settings, the budget; and how their JSON prints."""

from __future__ import annotations

import json
import math


def bank_with_content(args, open_bank):
    bank = open_bank(args.bank)
    return bank.with_content_file(args.content) if getattr(args, "content", None) else bank


def sampling_settings(args) -> dict:
    sampling = {}
    if args.sampling:
        try:
            sampling = json.loads(args.sampling)
        except ValueError as exc:
            raise ValueError(f"--sampling must be a JSON object: {exc}") from None
        if not isinstance(sampling, dict):
            raise ValueError(f"--sampling must be a JSON object, got {args.sampling!r}")
    for key, value in (("temperature", args.temperature), ("top_p", args.top_p)):
        if value is not None:
            sampling[key] = value
    return sampling


def budget_from_options(args):
    from catengine.clients import Budget

    if args.max_requests is None and args.max_completion_tokens is None:
        return None
    return Budget(max_requests=args.max_requests, max_completion_tokens=args.max_completion_tokens)


def json_default(obj):
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return str(obj)
