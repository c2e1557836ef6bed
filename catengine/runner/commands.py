"""``catengine run`` (ask an LLM a bank's questions adaptively) and ``catengine regrade`` (grade a
finished run's replies again with another grader); thin commands over :mod:`catengine.runner`."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from catengine.console import add_progress_argument
from catengine.runner.command_options import (ProgressBar, answer_reporting, bank_with_content, budget_from_options,
                                              exit_code, json_default, sampling_settings)

RUN_DESCRIPTION = """\
Put the bank's questions to an LLM behind an OpenAI-compatible chat-completions endpoint (vLLM,
llama.cpp's server, Ollama, SGLang, a hosted API), adaptively: the session chooses each batch of
items, they are asked at once (--concurrency), each reply is graded by the bank's grader and
recorded with its text and token counts in the log, and the run stops once the predicted
full-benchmark accuracy is known to the stopping rule's precision. The log is the record: the same
command resumes a killed run without asking a recorded item again. The API key is read from the
environment variable --api-key-env names (none is needed for a local server).

With --compare-with MODEL, two LLMs are compared on the same items instead: a paired session draws
one item at a time, both models are asked it at once, and the run stops once one is known to be
better on the whole benchmark (an interval valid at any stop, docs/comparisons.md), once they are
tied within --margin, or at the item cap. The same command resumes a killed comparison.
"""


def add_subcommands(sub, *, add_strategy_options, strategies, open_bank) -> None:
    """Register ``catengine run`` and ``catengine regrade`` (called by ``catengine.cli``)."""
    run = sub.add_parser("run", help="ask an LLM endpoint the bank's questions adaptively, grade, stop on the score",
                         description=RUN_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    run.add_argument("--bank", default=None, help="a shipped bank id, bank directory or file (default math500_lart)")
    run.add_argument("--model", required=True, help="the model name the endpoint serves")
    run.add_argument("--base-url", default=None,
                     help="the endpoint's base URL, e.g. http://127.0.0.1:8000/v1 (default: the openai client's, "
                          "OPENAI_BASE_URL or api.openai.com)")
    run.add_argument("--api-key-env", default="OPENAI_API_KEY", metavar="VAR",
                     help="environment variable holding the API key (default OPENAI_API_KEY; unset: no key)")
    run.add_argument("--content", type=Path, default=None, metavar="FILE",
                     help="the question texts for a bank that ships only their hashes (amc23_lart), verified")
    run.add_argument("--concurrency", type=int, default=None,
                     help="items asked at once (default 4; a comparison asks its two models one item at a time)")
    run.add_argument("--max-tokens", type=int, default=None,
                     help="output cap per reply (default: the cap the calibration LLMs ran with, e.g. 10240 for the "
                          "LaRT banks, so that CoT lengths are comparable)")
    run.add_argument("--temperature", type=float, default=None, help="sampling temperature (default: the server's)")
    run.add_argument("--top-p", type=float, default=None, help="nucleus sampling (default: the server's)")
    run.add_argument("--sampling", default=None, metavar="JSON",
                     help='further request parameters as a JSON object, e.g. \'{"seed": 1}\' (passed through)')
    run.add_argument("--inline-reasoning", choices=("auto", "opened", "off"), default="auto",
                     help="reasoning written in the reply before the answer (<think> ... </think>): 'auto' grades the "
                          "text after the closing tag, 'opened' also when the chat template wrote the opening tag "
                          "(a reply with no closing tag is unfinished reasoning), 'off' logs the reply whole (the "
                          "graders still set a tagged block aside) (default auto; docs/running_models.md)")
    run.add_argument("--timeout", type=float, default=600.0, help="seconds per request before it is retried (default 600)")
    run.add_argument("--retries", type=int, default=6, help="retries of a failed request (429, 5xx, timeouts; default 6)")
    run.add_argument("--max-requests", type=int, default=None, help="stop before sending more requests than this")
    run.add_argument("--max-completion-tokens", type=int, default=None,
                     help="stop before the completion tokens spent could exceed this")
    run.add_argument("--include-flagged", action="store_true",
                     help="also ask items whose calibration grading is known to be wrong (left out by default)")
    run.add_argument("--log", type=Path, default=None,
                     help="the run's session log (default runs/<bank>-<model>.jsonl); an existing log is resumed")
    run.add_argument("--subject", default=None, help="subject id in the log (default: the model name)")
    run.add_argument("--fsync", action="store_true",
                     help="sync every log line to disk (survives a power loss, not only a killed process)")
    run.add_argument("--json", action="store_true", help="print one JSON line per answer and a final {\"summary\": ...}")
    add_progress_argument(run)
    pair = run.add_argument_group(
        "comparing two models", description="--compare-with asks a second model the same items and compares the two "
        "(model a: --model, model b: --compare-with); the log is a paired-session log (default "
        "runs/<bank>-<a>-vs-<b>.jsonl); --max-items caps the comparison (default 500 items, or every item "
        "compared when fewer: catengine.paired.DEFAULT_MAX_ITEMS; 0 = every item), --seed seeds its draws; the other selection and stopping options "
        "do not apply. Sampling, output cap and retry options apply to both models; --max-requests and "
        "--max-completion-tokens cap the two together.")
    pair.add_argument("--compare-with", default=None, metavar="MODEL", help="model b, the one --model is compared with")
    pair.add_argument("--compare-base-url", default=None, metavar="URL",
                      help="model b's endpoint (default: --base-url)")
    pair.add_argument("--compare-api-key-env", default=None, metavar="VAR",
                      help="environment variable holding model b's API key (default: --api-key-env)")
    pair.add_argument("--compare-subject", default=None, metavar="LABEL",
                      help="label of model b (default: its model name; --subject labels model a)")
    pair.add_argument("--margin", type=float, default=None, metavar="POINTS",
                      help="a tie: the interval lies within +-this many points (default 1)")
    pair.add_argument("--alpha", type=float, default=None, metavar="ALPHA",
                      help="error of the comparison's confidence sequence (default 0.05)")
    add_strategy_options(run)
    run.set_defaults(func=lambda args: _cmd_run(args, strategies, open_bank))

    rg = sub.add_parser("regrade", help="grade the replies a run's log holds again, with the same or another grader")
    rg.add_argument("--log", type=Path, required=True, help="the session log of a `catengine run`")
    rg.add_argument("--bank", default=None, help="the bank it ran on (default: the one the log names)")
    rg.add_argument("--content", type=Path, default=None, metavar="FILE", help="question texts (amc23_lart)")
    rg.add_argument("--grader", default=None, help="the grader to use (default: the bank's; see docs/grading.md)")
    rg.add_argument("--json", action="store_true", help="print the result as one JSON object")
    rg.set_defaults(func=lambda args: _cmd_regrade(args, open_bank))


def _default_log(bank, model: str) -> Path:
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in model)[:120] or "model"
    return Path("runs") / f"{bank.bank_id}-{safe}.jsonl"


def _cmd_run(args, strategies, open_bank) -> int:
    from catengine.clients import OpenAIChatClient
    from catengine.console import calibration_size, result_lines
    from catengine.runner import full_run_cost, run_model

    if args.compare_with is not None:
        from catengine.runner.pair_command import run_pair_command

        return run_pair_command(args, open_bank)
    given = [flag for flag, value in (("--compare-base-url", args.compare_base_url),
                                      ("--compare-api-key-env", args.compare_api_key_env),
                                      ("--compare-subject", args.compare_subject), ("--margin", args.margin),
                                      ("--alpha", args.alpha)) if value is not None]
    if given:
        raise ValueError(f"{', '.join(given)} appl{'ies' if len(given) == 1 else 'y'} to a comparison: give "
                         "--compare-with MODEL")
    bank = bank_with_content(args, open_bank)
    if args.concurrency is None:
        args.concurrency = 4
    if args.concurrency < 1:
        raise ValueError(f"--concurrency must be an integer >= 1, got {args.concurrency}")
    chosen = strategies(args, bank)
    sampling = sampling_settings(args)
    budget = budget_from_options(args)
    client = OpenAIChatClient(args.model, base_url=args.base_url, api_key_env=args.api_key_env, timeout=args.timeout,
                              max_retries=args.retries, sampling=sampling, budget=budget,
                              inline_reasoning=args.inline_reasoning)
    log = args.log or _default_log(bank, args.model)
    log.parent.mkdir(parents=True, exist_ok=True)
    resuming = log.exists() and log.stat().st_size > 0
    if not args.json:
        print(f"{'resuming' if resuming else 'running'} {args.model} at {client.endpoint} on {bank.bank_id} "
              f"v{bank.version} ({bank.n_items} items); log {log}", file=sys.stderr)
    bar, on_answer = answer_reporting(args, _Bar, _json_lines)
    try:
        result = run_model(bank, client, log=log, subject=args.subject, concurrency=args.concurrency,
                           max_tokens=args.max_tokens, sampling=sampling, selector=chosen["selector"],
                           stopping=chosen["stopping"], seed=args.seed, include_flagged=args.include_flagged,
                           on_answer=on_answer, fsync=args.fsync)
    finally:
        if bar is not None:
            bar.close()
    session, progress = result.session, result.progress
    score = session.predicted_score() if session.n_items else None
    cost = full_run_cost(bank, result, score) if score is not None else None
    summary = {"subject": session.subject, "model": args.model, "endpoint": client.endpoint, "bank": bank.bank_id,
               "bank_version": bank.version, "n_items": session.n_items, "stop_reason": result.stop_reason,
               "error": result.error, "score": None if score is None else score.to_dict(),
               "completion_tokens": progress.completion_tokens, "prompt_tokens": progress.prompt_tokens,
               "requests": progress.requests, "truncated_replies": progress.truncated, "wall_seconds": progress.seconds,
               "resumed_items": result.resumed_items, "excluded_flagged": result.excluded_flagged,
               "full_benchmark": cost, "log": str(log)}
    if args.json:
        print(json.dumps({"summary": summary}, default=json_default))
    else:
        if score is not None:
            print("\n".join(result_lines(score, result.stop_reason, calibration_size(session))))
        print(f"asked {session.n_items} of {bank.n_items} items ({progress.requests} requests"
              + (f", {result.resumed_items} recorded before this resume" if result.resumed_items else "")
              + f"); {progress.completion_tokens} completion tokens, {progress.prompt_tokens} prompt tokens; "
              f"{progress.seconds:.1f} s" + (f"; {progress.truncated} replies stopped at the output cap" if progress.truncated else ""))
        if cost is not None and math.isfinite(cost["completion_tokens"]):
            left_out = bank.n_items - cost["items"]
            print(f"the whole benchmark{f' less the {left_out} items left out' if left_out else ''} would have taken "
                  f"{cost['items']} items and about "
                  f"{cost['completion_tokens']:,.0f} completion tokens: this run used "
                  f"{100 * cost['share_of_items']:.0f}% of the items and {100 * cost['share_of_tokens']:.0f}% of the tokens")
    return exit_code(result, report=not args.json)


def _json_lines(progress, session) -> None:
    rec = session.history[-1]
    print(json.dumps({"step": rec.step, "item": rec.item, "correct": rec.correct, "cot_length": rec.cot_length,
                      "theta": rec.theta, "theta_sd": rec.theta_sd, "completion_tokens": progress.completion_tokens}),
          flush=True)


class _Bar(ProgressBar):
    """A tqdm bar showing the running score, its interval, items and tokens."""

    def update_from(self, progress, session) -> None:
        score = session.predicted_score(by=False)
        self._bar.n = progress.items
        self._bar.set_postfix_str(f"accuracy {100 * score.accuracy:.1f}% [{100 * score.low:.1f}, {100 * score.high:.1f}] "
                                  f"tokens {progress.completion_tokens:,}", refresh=True)


def _cmd_regrade(args, open_bank) -> int:
    from catengine.runner.regrade import regrade_log

    bank = None if args.bank is None else bank_with_content(args, open_bank)
    report = regrade_log(args.log, bank=bank, grader=args.grader, content=args.content)
    if args.json:
        print(json.dumps(report.to_dict(), default=json_default))
        return 0
    print("\n".join(report.lines()))
    return 0
