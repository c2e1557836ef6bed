"""What a replayed test leaves for the held-out check's score curves: its steps as arrays
(:class:`ReplayedSteps`) and the bank objects its session used (:class:`ReplayedSession`), without
the session's per-item state."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

__all__ = ["ReplayedSession", "ReplayedSteps", "replayed_steps_of_run"]


@dataclass(frozen=True)
class ReplayedSteps:
    """A replayed test as arrays, one entry per step: the item's bank index (``order``), the
    answer (``correct``, 0 / 1), its CoT length in tokens (``cot_length``, NaN: unknown) and the
    session's estimate after it (``theta``, ``theta_sd``; ``tau``, ``tau_sd`` on LaRT banks, None
    otherwise). NaN estimates where the replay did not compute them (random tests: only at the
    tabulated lengths)."""

    order: np.ndarray
    correct: np.ndarray
    cot_length: np.ndarray
    theta: np.ndarray
    theta_sd: np.ndarray
    tau: np.ndarray | None
    tau_sd: np.ndarray | None

    @classmethod
    def of_history(cls, bank, history) -> "ReplayedSteps":
        """The arrays of a session's ``history`` (``StepRecord`` objects) against ``bank``."""
        def floats(values):
            return np.array([math.nan if v is None else float(v) for v in values], dtype=np.float64)

        has_tau = any(r.tau is not None for r in history)
        return cls(np.array([bank.index_of(r.item) for r in history], dtype=np.int64),
                   np.array([r.correct for r in history], dtype=np.float64), floats(r.cot_length for r in history),
                   floats(r.theta for r in history), floats(r.theta_sd for r in history),
                   floats(r.tau for r in history) if has_tau else None,
                   floats(r.tau_sd for r in history) if has_tau else None)

    def records(self, item_ids) -> tuple:
        """The steps as a session's ``StepRecord`` objects (``item_ids``: the bank's ids), with None
        for an unknown CoT length or speed estimate."""
        from catengine.session.session import StepRecord

        def maybe(values):
            return [None] * len(self.order) if values is None else [None if v != v else v for v in values.tolist()]

        cots, taus, tau_sds = maybe(self.cot_length), maybe(self.tau), maybe(self.tau_sd)
        return tuple(StepRecord(step=n + 1, item=item_ids[j], correct=int(y), cot_length=cots[n], theta=theta,
                                theta_sd=sd, tau=taus[n], tau_sd=tau_sds[n], criterion=math.nan, proposed=True)
                     for n, (j, y, theta, sd) in enumerate(zip(self.order.tolist(), self.correct.tolist(),
                                                              self.theta.tolist(), self.theta_sd.tolist())))


def replayed_steps_of_run(run, correct_row, cot_row, lart: bool) -> ReplayedSteps:
    """The :class:`ReplayedSteps` of a compiled replay's ``run`` (``catengine.session.fast_replay``)
    of a subject with answers ``correct_row`` and CoT lengths ``cot_row`` over the bank (None: no
    CoT); the values ``CompiledReplay.history`` puts in the session's records."""
    items = run.items
    cots = np.full(items.size, math.nan)
    if lart and cot_row is not None:
        cots = np.asarray(cot_row, dtype=np.float64)[items]
    est = run.estimates[:, 1:]
    return ReplayedSteps(items.astype(np.int64), np.asarray(correct_row)[items].astype(int).astype(np.float64), cots,
                         est[0].copy(), est[1].copy(), est[2].copy() if lart else None, est[3].copy() if lart else None)


@dataclass(frozen=True)
class ReplayedSession:
    """What the score check reads of a replayed adaptive session: its steps as arrays
    (:class:`ReplayedSteps`) and the bank objects every session of a fold shares, without the
    session's per-item state (eleven arrays of the bank's length per session, for every held-out
    LLM and selector of the held-out check). ``history`` (the session's ``StepRecord`` objects, which
    the score prediction of a bank without score factors reads) is built on first use, by
    ``build_history`` when given, else from the steps (:meth:`ReplayedSteps.records`)."""

    bank: object
    items: object
    params: object
    estimator: object
    selector: object
    cot_offset: float
    steps: ReplayedSteps
    build_history: object = field(default=None, repr=False, compare=False)

    @cached_property
    def history(self) -> tuple:
        if self.build_history is None:
            return self.steps.records(list(self.bank.item_ids))
        return tuple(self.build_history())

    @classmethod
    def of(cls, session) -> "ReplayedSession":
        history = tuple(session.history)
        return cls(session.bank, session.items, session.params, session.estimator, session.selector,
                   session.cot_offset, ReplayedSteps.of_history(session.bank, history), lambda: history)
