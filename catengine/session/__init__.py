"""Online sessions: ``CATSession`` (one subject), ``Engine`` (many), durable JSONL logs, streaming.

* :class:`CATSession` — ``next_item()`` / ``record(item, correct, cot_length)`` / ``estimate`` /
  ``history`` / ``finished`` / ``to_dataset()``; ``CATSession.resume(log)`` after a crash.
* :class:`Engine` — sessions by subject id, one shared log; ``Engine.resume(log)``.
* :func:`serve` — the JSON-lines protocol behind ``catengine serve``.
* :func:`calibrate_sympson_hetter` — exposure control parameters by simulation.
* :func:`to_config` / :func:`from_config` — strategies <-> JSON through the registries.
"""

from catengine.session.config import from_config, to_config
from catengine.session.engine import Engine
from catengine.session import errors
from catengine.session.errors import *  # noqa: F403 -- every exception and warning named in errors.__all__
from catengine.session.log import read_log
from catengine.session.serve import serve
from catengine.session.session import CATSession, StepRecord
from catengine.session.simulate import calibrate_sympson_hetter, draw_traits, simulate_answer


def resume(log, bank=None, *, fsync: bool = False) -> Engine:
    """Rebuild every session of a log (see :meth:`Engine.resume`)."""
    return Engine.resume(log, bank, fsync=fsync)


__all__ = [
    "CATSession",
    "Engine",
    "StepRecord",
    "calibrate_sympson_hetter",
    "draw_traits",
    "from_config",
    "read_log",
    "resume",
    "serve",
    "simulate_answer",
    "to_config",
    *errors.__all__,
]
