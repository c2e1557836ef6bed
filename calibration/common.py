"""What the held-out check, the audits and the calibrators share: the 95% normal quantile, random
streams addressed by value, and an engine estimator by its registry name.

These sit below both ``calibration.heldout`` and ``calibration.audit``, so that neither imports the
other's internals for them.
"""

from __future__ import annotations

import zlib

import numpy as np

__all__ = ["Z95", "estimator_by_name", "stream"]

#: the two-sided 95% quantile of the standard normal, Phi^-1(0.975)
Z95 = 1.959963984540054


def _tag(value) -> int:
    if isinstance(value, (bool, np.bool_)):
        return int(value)
    if isinstance(value, (int, np.integer)) and value >= 0:
        return int(value)
    return zlib.crc32(str(value).encode())


def stream(entropy, replication: int, *tags) -> np.random.SeedSequence:
    """The SeedSequence of one stream of one replication: spawn key (replication, *tags).

    With no tags it equals ``np.random.SeedSequence(entropy).spawn(R)[replication]``; tags descend
    further, like ``.spawn`` of that child, but addressed by value instead of by call order
    (integers as they are, strings and negative numbers by their CRC-32). A stream therefore depends
    only on its own coordinates, not on which other streams were drawn or in what order.
    """
    return np.random.SeedSequence(entropy, spawn_key=(int(replication), *(_tag(t) for t in tags)))


def estimator_by_name(name: str, use_cot: bool, sd_scale: float = 1.0):
    """The registered trait estimator ``name`` (``catengine.estimation.ESTIMATORS``) with
    ``use_cot`` and ``sd_scale``; ValueError naming the allowed names for an unknown one."""
    from catengine.estimation import ESTIMATORS

    if name not in ESTIMATORS:
        raise ValueError(f"unknown estimator {name!r}; allowed: {', '.join(ESTIMATORS)}")
    return ESTIMATORS[name](use_cot=use_cot, sd_scale=sd_scale)
