"""Replays of held-out LLMs: their recorded answers (and CoT lengths) fed through adaptive tests
against a bank that did not see them, as the held-out check and the replay audit run them.

:func:`replay_llms` steps adaptive tests (one per selector and scoring) and scores every LLM on all
of its answers; :func:`random_replays` draws random-selection tests and scores them at the tabulated
lengths only. Each LLM's test runs in one compiled call where the configuration allows
(``catengine.session.fast_replay``: the same steps, estimates and draws as a ``CATSession``).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from calibration.common import estimator_by_name, stream
from calibration.heldout.replayed import ReplayedSession, ReplayedSteps, replayed_steps_of_run

__all__ = ["random_replays", "replay_llms"]


def replay_llms(bank, data, rows, selectors, scorings, estimator: str, L: int, entropy, replication,
                sd_scale: float = 1.0, keep_sessions: bool = False, compiled: bool = True) -> dict:
    """Replay the LLMs ``rows`` of ``data`` (a ``ResponseData``) against ``bank``: raw per-LLM figures.

    ``selectors``: [(name, ItemSelector or None)] (None: the session's default selector for the bank).
    Returns ``full`` (scoring, llm): the estimate from every observed answer; ``full_sd``
    (selector, scoring, llm): its SD as a session with that selector reports it (a bank's held-out
    check stores one curve per selector, and the nested-variance identity behind the RMS ratio
    compares SD_L and SD_F of the same curve: with the default selector's SD_F, random LaRT
    sessions on MATH500, whose curve is half as wide, read an RMS ratio of 1.2-1.5 that was this
    mismatch); and ``est`` / ``sd`` / ``half`` (selector, scoring, llm, step): the adaptive
    estimate after each of ``L`` items and the half-width of its 95% interval.
    Sessions run with the engine's defaults otherwise (the bank's item uncertainty and its stored
    held-out check, if any, are used). ``keep_sessions``: also return ``sessions``
    [selector][scoring] -> one ``ReplayedSession`` (history and bank objects) per LLM, for the
    score curves. ``compiled`` (default): each LLM's test in one compiled call where the
    configuration allows (``catengine.session.fast_replay``: the same steps, estimates and draws as
    a session); False: every test stepped through a ``CATSession`` (the reference).
    """
    rows = list(rows)
    n = len(rows)
    full, full_sd = np.empty((len(scorings), n)), np.empty((len(selectors), len(scorings), n))
    est, sd, half = (np.empty((len(selectors), len(scorings), n, L)) for _ in range(3))
    sessions = [[[] for _ in scorings] for _ in selectors]
    for c, scoring in enumerate(scorings):
        estimator_obj = estimator_by_name(estimator, scoring == "lart", sd_scale)
        give_cot = scoring == "lart" and data.cot_length is not None
        full[c], full_sd[:, c] = _full_estimates(bank, data, rows, selectors, estimator_obj, give_cot, compiled)
        for r, (sel_name, selector) in enumerate(selectors):
            engine_rng = np.random.default_rng(stream(entropy, replication, "engine", sel_name, scoring))
            test = _AdaptiveTests(bank, data, selector, estimator_obj, L, give_cot, engine_rng, keep_sessions)
            test.run(rows, compiled, est[r, c], sd[r, c], half[r, c], sessions[r][c])
    out = {"full": full, "full_sd": full_sd, "est": est, "sd": sd, "half": half}
    if keep_sessions:
        out["sessions"] = sessions
    return out


def _full_estimates(bank, data, rows, selectors, estimator_obj, give_cot, compiled):
    """(theta (llm,), SD (selector, llm)): every LLM of ``rows`` scored on all of its observed answers,
    with the SD a session of each selector reports (one scoring session per selector when the bank's
    stored curves differ by selector; else one)."""
    from catengine.session import CATSession
    from catengine.session.fast_replay import CompiledReplay

    ids = list(bank.item_ids)
    scorers = ([CATSession(bank, selector=selector, estimator=estimator_obj) for _, selector in selectors]
               if "interval_calibration" in bank.attrs else [CATSession(bank, estimator=estimator_obj)])
    # the same estimates in one compiled call per LLM where the estimator allows (CompiledReplay.estimates_at)
    fast_scorers = [CompiledReplay.for_estimates(scorer) for scorer in scorers] if compiled else [None]
    if any(f is None for f in fast_scorers):
        fast_scorers = None
    theta, theta_sd = np.empty(len(rows)), np.empty((len(selectors), len(rows)))
    for k, i in enumerate(rows):
        seen = np.flatnonzero(data.correct[i] >= 0)
        if fast_scorers is not None:
            cot_row = data.cot_length[i] if give_cot else None
            estimates = [f.estimates_at(seen, data.correct[i], cot_row, [seen.size])[0] for f in fast_scorers]
        else:
            cots = [None] * seen.size
            if give_cot:
                cots = [None if v != v else v for v in data.cot_length[i, seen].tolist()]  # NaN: unknown
            answers = ([ids[j] for j in seen], data.correct[i, seen], cots)
            estimates = [scorer.estimate_from(*answers) for scorer in scorers]  # the same theta, SDs by curve
        theta[k] = estimates[0].theta
        theta_sd[:, k] = [e.theta_sd for e in estimates] if len(estimates) > 1 else estimates[0].theta_sd
    return theta, theta_sd


class _AdaptiveTests:
    """The adaptive tests of one selector and scoring: ``L`` items per LLM, every test drawing from
    the one ``engine_rng`` in row order (compiled or stepped, the same draws)."""

    def __init__(self, bank, data, selector, estimator, L, give_cot, engine_rng, keep_sessions):
        self.bank, self.data, self.selector, self.estimator = bank, data, selector, estimator
        self.L, self.give_cot, self.engine_rng, self.keep_sessions = L, give_cot, engine_rng, keep_sessions

    def session(self):
        from catengine.session import CATSession
        from catengine.stopping import MaxItems

        return CATSession(self.bank, selector=self.selector, estimator=self.estimator, stopping=MaxItems(self.L),
                          rng=self.engine_rng)

    def run(self, rows, compiled, est, sd, half, sessions):
        """Fill ``est``, ``sd``, ``half`` (llm, step) and ``sessions`` (kept ones) for ``rows``."""
        from catengine.session.fast_replay import CompiledReplay

        # one compiled call per LLM where the configuration allows (the same steps, the same draws)
        fast = CompiledReplay.for_session(self.session()) if compiled else None
        if fast is not None:
            self.compiled(fast, rows, est, sd, half, sessions)
        else:
            self.stepped(rows, est, sd, half, sessions)

    def compiled(self, fast, rows, est, sd, half, sessions):
        from catengine.errors import BankExhaustedError

        template, L = fast.session, self.L
        for k, i in enumerate(rows):
            y = self.data.correct[i].astype(np.float64)
            cots = self.data.cot_length[i] if self.give_cot else None
            run = fast.run(y, cots, L, self.engine_rng)
            if run.steps < L:
                raise BankExhaustedError(f"LLM row {i} has {run.steps} answered items, fewer than the test's {L}")
            est[k], sd[k] = run.estimates[0, 1:], run.estimates[1, 1:]
            half[k] = fast.half_widths(run)
            if self.keep_sessions:
                sessions.append(ReplayedSession(
                    template.bank, template.items, template.params, template.estimator, template.selector,
                    template.cot_offset, replayed_steps_of_run(run, y, cots, fast.lart),
                    functools.partial(fast.history, run, y, cots)))

    def stepped(self, rows, est, sd, half, sessions):
        data = self.data
        ids = list(self.bank.item_ids)
        index = {item: k for k, item in enumerate(ids)}
        for k, i in enumerate(rows):
            s = self.session()
            for j in np.flatnonzero(data.correct[i] < 0):
                s.exclude(ids[j])
            for step in range(self.L):
                item = s.next_item()
                j = index[item]
                value = data.cot_length[i, j] if self.give_cot else math.nan
                e = s.record(item, int(data.correct[i, j]), None if np.isnan(value) else float(value))
                est[k, step], sd[k, step] = e.theta, e.theta_sd
                half[k, step] = e.interval(0.95)[1] - e.theta
            if self.keep_sessions:
                sessions.append(ReplayedSession.of(s))


def random_replays(bank, data, rows, lengths, scoring, estimator, seed, replication):
    """Random-selection tests of the LLMs ``rows`` against ``bank``, scored at ``lengths`` only.

    A random test is a uniformly random order of the LLM's answered items (what a session with
    ``RandomSelection`` draws), and its estimate after L items is the MAP of those L answers, which
    ``CATSession.estimate_from`` computes in one solve (the same posterior as recording them one
    by one; tests/test_interval_calibration_fast.py compares the two), here all lengths of an LLM
    in one compiled call where the estimator allows (``CompiledReplay.estimates_at``, the same
    estimates; tests/test_fast_replay.py). Returns est, sd (llm, length) and one
    ``ReplayedSession`` per LLM whose steps hold every administered item with the estimate at the
    tabulated lengths (NaN at the other steps: the score curves read no other)."""
    from catengine.selection import RandomSelection
    from catengine.session import CATSession
    from catengine.session.fast_replay import CompiledReplay

    ids = list(bank.item_ids)
    give_cot = scoring == "lart" and data.cot_length is not None
    session = CATSession(bank, selector=RandomSelection(), estimator=estimator_by_name(estimator, scoring == "lart"))
    rng = np.random.default_rng(stream(seed, replication, "engine", "random", scoring))
    L_max = int(lengths[-1])
    at_steps = np.asarray(lengths, dtype=np.int64) - 1
    est, sd = np.empty((len(rows), len(lengths))), np.empty((len(rows), len(lengths)))
    sessions = []
    fast = CompiledReplay.for_estimates(session)  # the same estimates in one compiled call per LLM
    for k, i in enumerate(rows):
        order = rng.permutation(np.flatnonzero(data.correct[i] >= 0))[:L_max]
        if fast is not None:
            found = fast.estimates_at(order, data.correct[i], data.cot_length[i] if give_cot else None, lengths)
        else:
            items = [ids[j] for j in order]
            cots = [None if not give_cot or np.isnan(v) else float(v) for v in
                    (data.cot_length[i, order] if give_cot else np.full(order.size, np.nan))]
            correct = [int(v) for v in data.correct[i, order]]
            found = [session.estimate_from(items[:L], correct[:L], cots[:L]) for L in lengths]
        est[k] = [e.theta for e in found]
        sd[k] = [e.theta_sd for e in found]
        sessions.append(ReplayedSession(session.bank, session.items, session.params, session.estimator,
                                        session.selector, session.cot_offset,
                                        _random_steps(data, i, order, give_cot, at_steps, found)))
    return est, sd, sessions


def _random_steps(data, row, order, give_cot, at_steps, found):
    """The :class:`ReplayedSteps` of a random test: the items ``order`` of data row ``row``, with the
    estimates ``found`` at the steps ``at_steps`` (NaN elsewhere)."""
    n = order.size

    def at(values):
        out = np.full(n, math.nan)
        out[at_steps] = values
        return out

    has_tau = any(e.tau is not None for e in found)
    return ReplayedSteps(
        order.astype(np.int64), data.correct[row, order].astype(np.float64),
        data.cot_length[row, order].astype(np.float64) if give_cot else np.full(n, math.nan),
        at([e.theta for e in found]), at([e.theta_sd for e in found]),
        at([math.nan if e.tau is None else e.tau for e in found]) if has_tau else None,
        at([math.nan if e.tau_sd is None else e.tau_sd for e in found]) if has_tau else None)
