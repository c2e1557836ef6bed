"""Docstrings state the defaults the code has.

The defaults the main entry points describe in words (the session's selector and stopping rule,
the randomised design's uniform share, the comparison's) against the code; and every number a
calibrator setting's help, a calibrator's numpy-style docstring or an option's help of either
command-line tool states as its default, against the default the code has.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_NUMBER = r"([-+]?\d[\d_]*(?:\.\d+)?(?:[eE][-+]?\d+)?)"
_HELP_DEFAULT = re.compile(r"\(default:?\s*" + _NUMBER + r"(?=[\s),;:%])")
_NUMPY_DEFAULT = re.compile(r"^\s*(\w+)\s*:\s*[^\n,]*,\s*default\s+" + _NUMBER + r"\s*$", re.MULTILINE)


def _calibrators():
    from calibration.methods import METHODS

    return [m.calibrator for m in METHODS.values()]


def _rows_of_calibrators():
    """(where, stated, actual) for each calibrator setting whose help, or the class docstring's
    numpy-style ``name : type, default N`` line, states a number."""
    import inspect

    for cls in _calibrators():
        signature = inspect.signature(cls)
        for name, setting in cls.SETTINGS.items():
            stated = _HELP_DEFAULT.search(setting.help or "")
            default = signature.parameters[name].default if name in signature.parameters else None
            if stated and isinstance(default, (int, float)) and not isinstance(default, bool):
                yield f"{cls.__name__} setting {name!r}", stated.group(1), default
        for name, stated in _NUMPY_DEFAULT.findall(cls.__doc__ or ""):
            default = signature.parameters[name].default if name in signature.parameters else None
            if isinstance(default, (int, float)) and not isinstance(default, bool):
                yield f"{cls.__name__} docstring {name!r}", stated, default


def _rows_of_parser(parser, prefix):
    """(where, stated, actual) for every option, in every subcommand, whose help states a number."""
    import argparse

    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _rows_of_parser(sub, f"{prefix} {name}")
            continue
        stated = _HELP_DEFAULT.search(action.help or "")
        if stated and isinstance(action.default, (int, float)) and not isinstance(action.default, bool):
            yield f"{prefix} {'/'.join(action.option_strings)}", stated.group(1), action.default


def _wrong(rows):
    return [(where, stated, actual) for where, stated, actual in rows if float(stated) != float(actual)]


def test_calibrator_settings_state_their_defaults():
    rows = list(_rows_of_calibrators())
    assert len(rows) >= 20  # the check reads what it should
    assert _wrong(rows) == []


def test_command_line_help_states_the_defaults():
    from calibration.cli import build_parser as calibration_parser
    from catengine.cli import build_parser as catengine_parser

    rows = [*_rows_of_parser(catengine_parser(), "catengine"), *_rows_of_parser(calibration_parser(), "calibration")]
    assert len(rows) >= 20
    assert _wrong(rows) == []


def test_the_session_states_its_default_selector_and_stopping_rule():
    from catengine import CATSession, open_item_bank
    from catengine.selection import DoublyRobustSelection
    from catengine.stopping import rules

    doc = " ".join(CATSession.__doc__.split())
    assert "default_selector_for" in doc and "DoublyRobustSelection" in doc
    assert isinstance(CATSession(open_item_bank("math500_2pl")).selector, DoublyRobustSelection)
    stated = re.search(r"within \+-(\d+) points, half its 95% interval, after at least (\d+) items, or (\d+) items", doc)
    assert stated, doc
    assert (int(stated.group(1)) / 100, int(stated.group(2)), int(stated.group(3))) == (
        rules.DEFAULT_SCORE_HALF_WIDTH, rules.DEFAULT_MIN_ITEMS, rules.DEFAULT_MAX_ITEMS)


def test_the_randomised_design_states_its_uniform_share():
    from catengine.selection import RandomisedSelection

    stated = re.search(r"The default (\d\.\d+) came from simulations", RandomisedSelection.__doc__)
    assert stated and float(stated.group(1)) == RandomisedSelection().uniform_share


@pytest.mark.parametrize("module, name, words", [
    ("catengine.paired.session", "PairedSession", r"``uniform_share`` \(default ([\d.]+)\)"),
])
def test_the_comparison_states_its_defaults(module, name, words):
    import importlib
    import inspect

    cls = getattr(importlib.import_module(module), name)
    stated = re.search(words, cls.__doc__)
    assert stated, cls.__doc__
    default = inspect.signature(cls).parameters["uniform_share"].default
    assert float(stated.group(1)) == default
