"""What ``catengine run`` (one model or two) and ``catengine regrade`` read from their options: the
bank with any attached content, the sampling settings, the budget; how their JSON prints; and what
both kinds of run share on the way out: the per-answer report (JSON lines or a progress bar) and
the exit code."""

from __future__ import annotations

import json
import math
import sys

from catengine.console import progress_enabled


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


class ProgressBar:
    """A tqdm bar on stderr (without a total: a run's length is not known in advance); a subclass
    shows a run's state in ``update_from(progress, session)``."""

    def __init__(self):
        from tqdm import tqdm

        self._bar = tqdm(total=None, unit="item", file=sys.stderr, dynamic_ncols=True, leave=True)

    def close(self) -> None:
        self._bar.close()


def answer_reporting(args, bar_class, json_lines) -> tuple:
    """(the progress bar or None, the callback run after each answer or None): ``json_lines`` with
    ``--json``, else a ``bar_class`` bar where one can be seen (``--progress`` / ``--no-progress``)."""
    bar = bar_class() if not args.json and progress_enabled(args.progress) else None
    on_answer = json_lines if args.json else (bar.update_from if bar is not None else None)
    return bar, on_answer


def exit_code(result, *, report: bool) -> int:
    """0 when a run ended on its stopping rule, 3 when an error stopped it early (named on stderr when
    ``report``)."""
    if report and result.error:
        print(f"catengine run: stopped early: {result.error}", file=sys.stderr)
    return 0 if result.error is None else 3
