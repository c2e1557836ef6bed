"""How the command-line tools (``catengine``, ``calibration``) and the harness adapters word what they
show: warnings as one line (``prog: ConvergenceWarning: message``, without the library's source path
and line of code), and the result of an adaptive test in the same three statements everywhere:

    predicted full-benchmark accuracy 58.3% (95% interval 50.6-66.0%, +-7.7 points), from 100 of 500 items
    stopped: reached 100 items
    standing: ahead of 64% of the 158 calibration LLM runs

(:func:`result_lines`). The standing is ``ScoreEstimate.percentile``: the share of the bank's
calibration LLM runs that answered fewer of the LLM's items correctly than it did, on the same items
(``catengine.scoring.standing``), with the extrapolation flag when that places the LLM beyond them. :func:`describe_stopping` words a stopping rule
("stop once ..."). These functions only format values they are given: they compute nothing.

Both tools also share one progress switch, ``--progress / --no-progress``
(:func:`add_progress_argument`): by default a bar on stderr where it can be seen (a terminal or a
notebook, :func:`progress_bar_visible`), none in logs, pipes and CI output; the Python API follows
the same rule.
"""

from __future__ import annotations

import sys
import warnings
from contextlib import contextmanager


def progress_bar_visible(stream=None) -> bool:
    """Whether a progress bar would be seen: ``stream`` (default stderr) is a terminal, or this
    runs in a Jupyter kernel (where tqdm draws a widget). Logs, pipes and CI output get none."""
    stream = sys.stderr if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    try:
        if isatty is not None and isatty():
            return True
    except (OSError, ValueError):  # a closed stream
        return False
    shell = getattr(sys.modules.get("IPython"), "get_ipython", lambda: None)()
    return type(shell).__name__ == "ZMQInteractiveShell" and "ipykernel" in sys.modules


def add_progress_argument(parser) -> None:
    """``--progress / --no-progress`` on an argparse parser (``args.progress``: True, False or None)."""
    import argparse

    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                        help="progress bar on stderr (default: on when stderr is a terminal)")


def progress_enabled(flag: bool | None, stream=None) -> bool:
    """``flag`` as given, or, when None, whether a bar on ``stream`` (default stderr) would be seen."""
    return bool(flag) if flag is not None else progress_bar_visible(stream)


@contextmanager
def plain_warnings(prog: str, enabled: bool = True):
    """Within the block, warnings print as ``prog: Category: message`` on stderr (the filters, e.g.
    ``-W error`` or ``PYTHONWARNINGS``, still decide which are shown); ``enabled=False`` leaves
    Python's format (the tools called from Python, e.g. by tests)."""
    if not enabled:
        yield
        return
    previous = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        print(f"{prog}: {category.__name__}: {message}", file=sys.stderr if file is None else file)

    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = previous


# ----------------------------------------------------------------------------- the result of a test
def score_headline(score) -> str:
    """``predicted full-benchmark accuracy 58.3% (95% interval 50.6-66.0%, +-7.7 points), from 100 of
    500 items`` for a :class:`~catengine.scoring.ScoreEstimate`; the half-width is half the
    interval's width, as ``ScoreIntervalBelow`` measures it."""
    pct = round(100 * score.level)
    half = 50 * (score.high - score.low)
    return (f"predicted full-benchmark accuracy {100 * score.accuracy:.1f}% ({pct}% interval "
            f"{100 * score.low:.1f}-{100 * score.high:.1f}%, +-{half:.1f} points), "
            f"from {score.n_observed} of {score.n_items} items")


def stop_statement(stop_reason: str | None) -> str:
    """``stopped: <the stopping rule's reason>`` (``StoppingRule.reason``), or that it is not met yet."""
    return f"stopped: {stop_reason}" if stop_reason else "not stopped: the stopping rule is not met yet"


def standing_text(score, n_calibration: int | None) -> str | None:
    """``ahead of 64% of the 158 calibration LLM runs`` from ``score.percentile``, with the
    extrapolation flag when it is set; None before the first answer (the standing of the prior says
    nothing about the LLM) and when the bank stores no calibration traits."""
    if score.percentile is None or not n_calibration or not score.n_observed:
        return None
    text = f"ahead of {100 * score.percentile:.0f}% of the {n_calibration} calibration LLM runs"
    if score.extrapolation:
        text += f"; {score.extrapolation} the calibration population: the model extrapolates"
    return text


def calibration_size(session) -> int | None:
    """How many calibration LLM runs the session's bank ranks an LLM among (None: it stores none)."""
    population = getattr(getattr(session, "items", None), "population", None)
    return None if population is None else int(population.n_runs)


def result_lines(score, stop_reason: str | None, n_calibration: int | None) -> list[str]:
    """The result of an adaptive test as shown by every entry point: the predicted score with its
    interval and the items used, what the stop was, and the standing among the calibration LLMs
    (:func:`standing_text`, when there is one)."""
    lines = [score_headline(score), stop_statement(stop_reason)]
    standing = standing_text(score, n_calibration)
    if standing is not None:
        lines.append(f"standing: {standing}")
    return lines


# ----------------------------------------------------------------------------- stopping rules in words
def _condition(rule, inside: str | None = None) -> str:
    from catengine.stopping import (AllOf, AnyOf, InformationBelow, MaxItems, MinItems, RivalOrderDecided,
                                    ScoreIntervalBelow, StandardErrorBelow)

    if isinstance(rule, ScoreIntervalBelow):
        return (f"the predicted accuracy is known to within +-{100 * rule.half_width:g} points "
                f"({100 * rule.level:g}% interval)")
    if isinstance(rule, StandardErrorBelow):
        return f"the posterior SD of {rule.trait} is at most {rule.target:g}"
    if isinstance(rule, MinItems):
        return f"at least {rule.n} items are answered"
    if isinstance(rule, MaxItems):
        return f"{rule.n} items are answered"
    if isinstance(rule, InformationBelow):
        return f"no eligible item has information above {rule.threshold:g}"
    if isinstance(rule, RivalOrderDecided):
        return f"the order with {len(rule.rivals)} rival LLM(s) is decided at probability {rule.probability:g}"
    if isinstance(rule, AllOf):
        # the item-count floor last: "the score is known ... and at least 10 items are answered"
        parts = sorted(rule.rules, key=lambda r: isinstance(r, MinItems))
        return " and ".join(_condition(r, "all") for r in parts)
    if isinstance(rule, AnyOf):
        text = ", or ".join(_condition(r, "any") for r in rule.rules)
        return f"({text})" if inside == "all" and len(rule.rules) > 1 else text
    return f"the rule {rule.name or type(rule).__name__} is met"


def describe_stopping(rule) -> str:
    """A stopping rule in words: ``stop once the predicted accuracy is known to within +-5 points (95%
    interval) and at least 10 items are answered, or 100 items are answered``."""
    return "stop once " + _condition(rule)


__all__ = ["calibration_size", "describe_stopping", "plain_warnings", "result_lines", "score_headline",
           "standing_text", "stop_statement"]
