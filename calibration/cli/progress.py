"""The ``--progress / --no-progress`` switch shared by the long-running commands.

Default: a tqdm bar on stderr when stderr is a terminal (or in a notebook), none when it is piped
or redirected (so logs and CI output stay clean); ``--progress`` forces it, ``--no-progress``
hides it. The Python API follows the same rule (:func:`calibration.base.progress_bar_visible`).
"""

from __future__ import annotations

import argparse


def add_progress_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                        help="progress bar on stderr (default: on when stderr is a terminal)")


def progress_enabled(flag: bool | None, stream=None) -> bool:
    """``flag`` as given, or, when None, whether a bar on ``stream`` (default stderr) would be
    seen: a terminal or a notebook."""
    from calibration.base import progress_bar_visible

    if flag is not None:
        return bool(flag)
    return progress_bar_visible(stream)
