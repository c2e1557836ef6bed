"""The ``--progress / --no-progress`` switch shared by the long-running commands.

Default: a tqdm bar on stderr when stderr is a terminal, none when it is piped or redirected
(so logs and CI output stay clean); ``--progress`` forces it, ``--no-progress`` hides it.
"""

from __future__ import annotations

import argparse
import sys


def add_progress_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                        help="progress bar on stderr (default: on when stderr is a terminal)")


def progress_enabled(flag: bool | None, stream=None) -> bool:
    """``flag`` as given, or, when None, whether ``stream`` (default stderr) is a terminal."""
    if flag is not None:
        return bool(flag)
    stream = sys.stderr if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())
