"""``catengine run --model A --compare-with B``: two LLMs compared on the same items
(:func:`catengine.runner.run_pair`), with its own log, progress bar and summary."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from catengine.runner.command_options import (ProgressBar, answer_reporting, bank_with_content, budget_from_options,
                                              exit_code, json_default, sampling_settings)


#: selection, estimation and stopping options of a single run that a comparison does not use: dest -> (flag, default)
_NOT_FOR_PAIRS = {"selector": ("--selector", None), "estimator": ("--estimator", "map"), "no_cot": ("--no-cot", False),
                  "sd_scale": ("--sd-scale", 1.0), "score_within": ("--score-within", None),
                  "target_sd": ("--target-sd", None), "min_items": ("--min-items", None),
                  "min_information": ("--min-information", None), "rivals": ("--rivals", None),
                  "randomesque": ("--randomesque", 1), "content_field": ("--content-field", None),
                  "content_targets": ("--content-targets", None), "sympson_hetter": ("--sympson-hetter", None),
                  "concurrency": ("--concurrency", None)}


def _default_pair_log(bank, model_a: str, model_b: str) -> Path:
    def safe(name):
        return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)[:80] or "model"

    return Path("runs") / f"{bank.bank_id}-{safe(model_a)}-vs-{safe(model_b)}.jsonl"


def run_pair_command(args, open_bank) -> int:
    """``catengine run --model A --compare-with B``: :func:`catengine.runner.run_pair`."""
    from catengine.clients import OpenAIChatClient
    from catengine.paired import PairedStopping
    from catengine.paired.commands import comparison_lines
    from catengine.runner import run_pair

    unused = [flag for dest, (flag, default) in _NOT_FOR_PAIRS.items() if getattr(args, dest, default) != default]
    if unused:
        raise ValueError(f"{', '.join(unused)} do{'es' if len(unused) == 1 else ''} not apply to a comparison "
                         "(--compare-with): it asks both models one item at a time, drawn by the paired design, and "
                         "stops once decided, tied or at --max-items")
    if args.max_items is not None and args.max_items < 0:
        raise ValueError(f"--max-items must be an integer >= 0 (0 = the whole bank), got {args.max_items}")
    if args.seed is not None and args.seed < 0:
        raise ValueError(f"--seed must be an integer >= 0, got {args.seed}")
    if args.margin is not None and not 0 <= args.margin < 100:
        raise ValueError(f"--margin must be a number of points >= 0 and < 100, got {args.margin}")
    bank = bank_with_content(args, open_bank)
    sampling = sampling_settings(args)
    budget = budget_from_options(args)
    clients = [OpenAIChatClient(model, base_url=url, api_key_env=key, timeout=args.timeout, max_retries=args.retries,
                                sampling=sampling, budget=budget, inline_reasoning=args.inline_reasoning)
               for model, url, key in ((args.model, args.base_url, args.api_key_env),
                                       (args.compare_with, args.compare_base_url or args.base_url,
                                        args.compare_api_key_env or args.api_key_env))]
    subjects = None
    if args.subject is not None or args.compare_subject is not None:
        subjects = (args.subject or args.model, args.compare_subject or args.compare_with)
    stopping = None
    if args.max_items is not None:
        stopping = PairedStopping(max_items=args.max_items or bank.n_items)
    log = args.log or _default_pair_log(bank, args.model, args.compare_with)
    log.parent.mkdir(parents=True, exist_ok=True)
    resuming = log.exists() and log.stat().st_size > 0
    if not args.json:
        print(f"{'resuming' if resuming else 'comparing'} {args.model} at {clients[0].endpoint} with {args.compare_with} "
              f"at {clients[1].endpoint} on {bank.bank_id} v{bank.version} ({bank.n_items} items); log {log}",
              file=sys.stderr)
    bar, on_answer = answer_reporting(args, _PairBar, _pair_json_lines)
    try:
        result = run_pair(bank, clients[0], clients[1], log=log, subjects=subjects, max_tokens=args.max_tokens,
                          sampling=sampling, stopping=stopping,
                          margin=None if args.margin is None else args.margin / 100.0, alpha=args.alpha,
                          seed=args.seed, include_flagged=args.include_flagged, on_answer=on_answer, fsync=args.fsync)
    finally:
        if bar is not None:
            bar.close()
        for client in clients:
            client.close()
    c, progress = result.comparison, result.progress
    summary = {"model_a": args.model, "endpoint_a": clients[0].endpoint, "model_b": args.compare_with,
               "endpoint_b": clients[1].endpoint, "bank": bank.bank_id, "bank_version": bank.version,
               "n_items": progress.items, "stop_reason": result.stop_reason, "error": result.error,
               **{f"{key}_{side}": getattr(progress.side(side), key) for side in ("a", "b")
                  for key in ("correct", "completion_tokens", "prompt_tokens", "requests", "truncated")},
               "wall_seconds": progress.seconds, "resumed_items": result.resumed_items,
               "excluded_flagged": result.excluded_flagged, "log": str(log)}
    if args.json:
        print(json.dumps({"comparison": c.to_dict(), "summary": summary}, default=json_default))
    else:
        print("\n".join(comparison_lines(c)))
        for side, label in (("a", c.subject_a), ("b", c.subject_b)):
            p = progress.side(side)
            print(f"  {label}: {p.correct} of {progress.items} correct, {p.completion_tokens:,} completion tokens, "
                  f"{p.prompt_tokens:,} prompt tokens, {p.requests} requests"
                  + (f", {p.truncated} replies stopped at the output cap" if p.truncated else ""))
        print(f"asked {progress.items} of {c.n_bank_items} items"
              + (f" ({result.resumed_items} recorded before this resume)" if result.resumed_items else "")
              + f"; {progress.seconds:.1f} s"
              + (f"; {len(result.excluded_flagged)} item(s) whose calibration grading is known to be wrong left out "
                 "(--include-flagged)" if result.excluded_flagged else ""))
    return exit_code(result, report=not args.json)


def _pair_json_lines(progress, session) -> None:
    step = session.history[-1]
    print(json.dumps({"step": step.step, "item": step.item, "correct_a": step.correct_a, "correct_b": step.correct_b,
                      "cot_length_a": step.cot_length_a, "cot_length_b": step.cot_length_b, "low": step.low,
                      "high": step.high, "decision": session.decision(),
                      "completion_tokens_a": progress.a.completion_tokens,
                      "completion_tokens_b": progress.b.completion_tokens}), flush=True)


class _PairBar(ProgressBar):
    """A tqdm bar showing the running difference's interval, items and both models' tokens."""

    def update_from(self, progress, session) -> None:
        step = session.history[-1]
        self._bar.n = progress.items
        self._bar.set_postfix_str(f"a - b in [{100 * step.low:+.1f}, {100 * step.high:+.1f}] points, "
                                  f"{session.decision()}; tokens {progress.a.completion_tokens:,} / "
                                  f"{progress.b.completion_tokens:,}", refresh=True)
