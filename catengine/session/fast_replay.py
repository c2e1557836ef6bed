"""Recorded answers replayed through a session's rules in one compiled call per subject.

A replay audit or a bank's interval check runs, for every held-out LLM, the adaptive test its
recorded answers would have given: step by step, the selector proposes, the recorded answer is
recorded, the estimate is updated. ``CATSession`` does this in Python at every step (validation,
logging hooks, objects per step); :class:`CompiledReplay` does the same steps in one numba call per
subject (``catengine.session._replay_kernel``) and returns the same history: the same items in
the same order, the same estimates and criterion values (to rounding: the kernel calls the
session's own compiled pieces, the design draws' probabilities included, which are bit for bit
the session's on logistic banks; on LaRT banks the normal CDF is numba's ``erfc`` here and
scipy's in the session, agreeing to ~1e-15), and it draws the same uniforms from the same generator, leaving it where a
session would (``tests/test_fast_replay.py`` compares both on every configuration it accepts).

It accepts the configurations the check and audits use: ``MAPEstimator``; 2PL and LaRT banks;
maximum Fisher information, posterior-expected information over the items' (a, b)
(``PosteriorExpectedInformation``, banks with item uncertainty), the sqrt-variance
``RandomisedSelection`` and the doubly robust selection with that design rule and maximum
information, posterior-expected information or score-factor D-optimal adaptive steps; no exposure
control. :meth:`CompiledReplay.for_session` returns None for anything else, and the
caller steps a session instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from catengine.estimation.base import TraitEstimate, TraitPrior
from catengine.estimation.map import MAPEstimator
from catengine.estimation.state import MODEL_2PL, MODEL_PROBIT
from catengine.models.expected_information import gauss_hermite_normal
from catengine.models.score_factors import POSTERIOR_MAX_ITER, POSTERIOR_TOL
from catengine.scoring.standing import MARGIN
from catengine.selection.base import DrawContext
from catengine.selection.doubly_robust import DoublyRobustSelection
from catengine.selection import kernels as selection_kernels
from catengine.selection.information import MaxFisherInformation, PosteriorExpectedInformation
from catengine.selection.randomised import RandomisedSelection
from catengine.selection.score_factors import ScoreFactorDOptimal
from catengine.session import _replay_kernel as K
from catengine.session.session import MIN_LOG_ARGUMENT, StepRecord

__all__ = ["CompiledReplay", "ReplayRun"]

_Z975 = NormalDist().inv_cdf(0.975)
#: the accuracy models the compiled replay computes (``ResponseModel.kernel_code``): 2PL and probit (LaRT)
REPLAYED_MODELS = (MODEL_2PL, MODEL_PROBIT)


@dataclass(frozen=True)
class ReplayRun:
    """One subject's replay: ``items`` (steps,) bank indices in order; ``estimates`` (8, steps + 1):
    theta, theta_sd, tau, tau_sd, theta_tau_cov, theta_sd_fixed_items, n_iter, converged before any
    answer and after each; ``criteria`` and ``design`` (steps,) per proposal."""

    items: np.ndarray
    estimates: np.ndarray
    criteria: np.ndarray
    design: np.ndarray

    @property
    def steps(self) -> int:
        return int(self.items.size)


def _own(values, dtype=np.float64) -> np.ndarray:
    """A writable C-contiguous copy of ``values`` (the kernels' one argument layout)."""
    return np.array(values, dtype=dtype, order="C", copy=True)


def _items_of(session) -> "K.ReplayItems":
    """The bank as the kernels read it (``ReplayItems``; the item covariance only when the
    estimator adds the item-uncertainty term)."""
    items, params = session.items, session.params
    lart = params.model.has_cot
    # every array the kernel takes is a private writable copy: one compiled specialisation
    # serves every configuration (numba compiles read-only arrays apart)
    a, b, c, d = (_own(v) for v in (params.a, params.b, items.c, items.d))
    cov = items.covariance if session.estimator.item_uncertainty else None
    zeros = np.zeros(params.n_items)
    va, vb, vab = (_own(cov.a_var), _own(cov.b_var), _own(cov.ab_cov)) if cov is not None else (zeros, zeros, zeros)
    phi, lam, omega = (_own(v) for v in (params.phi, params.lam, params.omega)) if lart else (zeros, zeros, zeros)
    return K.ReplayItems(params.model.kernel_code, a, b, c, d, cov is not None, va, vb, vab, lart, phi, lam, omega,
                         float(session.cot_offset))


def _estimator_of(session) -> "K.ReplayEstimator":
    """The MAP estimator's settings (``ReplayEstimator``): its prior (the bank's population when
    it has none) as a precision and a mean."""
    est, params = session.estimator, session.params
    prior = est.prior if est.prior is not None else TraitPrior.population(params)
    if params.model.has_cot:
        Q = prior.precision()
        q = (float(Q[0, 0]), float(Q[0, 1]), float(Q[1, 1]))
    else:
        q = (1.0 / prior.theta_sd**2, 0.0, 0.0)
    return K.ReplayEstimator(bool(est.use_cot), *q, float(prior.theta_mean), float(prior.tau_mean), int(est.max_iter),
                             float(est.tol))


def _selection_of(session, selector_code: int) -> "K.ReplaySelection":
    """The selector's schedule and design draw (``ReplaySelection``)."""
    items, sel = session.items, session.selector
    design = sel.design if isinstance(sel, DoublyRobustSelection) else sel
    pop = items.population
    low, high = pop.edges if pop is not None else (0.0, 0.0)
    # the standing that switches the design share: the calibration runs' answers, when the bank stores them
    has_responses = pop is not None and pop.responses is not None
    band_rates = _own(pop.band_rates) if has_responses else np.full((2, 2, session.params.n_items), np.nan)
    if isinstance(design, RandomisedSelection):
        eps = float(design.uniform_share)
        x, w = gauss_hermite_normal(design.n_nodes)
        gh_x, gh_w = _own(x), _own(w)
    else:
        eps, gh_x, gh_w = 0.5, np.zeros(1), np.ones(1)
    return K.ReplaySelection(selector_code, int(getattr(sel, "opening", 0)), float(getattr(sel, "share", 1.0)),
                             float(getattr(sel, "extrapolation_share", 1.0)), pop is not None, float(low), float(high),
                             has_responses, band_rates, MARGIN, eps, gh_x, gh_w)


def _adaptive_of(session, adaptive_code: int) -> "K.ReplayAdaptive":
    """The adaptive rule and its tables (``ReplayAdaptive``; placeholders for the other rules')."""
    items, sel, J = session.items, session.selector, session.params.n_items
    zeros = np.zeros(J)
    sf = items.score_factors
    if sf is not None and adaptive_code == K.ADAPTIVE_SCORE_FACTOR_D:
        g, h = _own(sf.loadings), _own(sf.intercepts)
        order, norm2 = sf.gain_scan
        g_order, g_norm2 = _own(order, np.int64), _own(norm2)
    else:
        g, h = np.zeros((J, 1)), zeros
        g_order, g_norm2 = np.zeros(0, dtype=np.int64), zeros
    # posterior-expected information steps: the bank's item covariance (whatever the estimator
    # does with it) and the selector's two Gauss-Hermite rules, as PosteriorExpectedInformation
    if adaptive_code == K.ADAPTIVE_EXPECTED_AB:
        adaptive = sel.adaptive_for(items) if isinstance(sel, DoublyRobustSelection) else sel
        cv = items.covariance
        x, w = gauss_hermite_normal(adaptive.n_nodes)
        xs, ws = gauss_hermite_normal(min(adaptive.n_nodes, selection_kernels.NARROW_NODES))
        expected = (_own(cv.a_var), _own(cv.b_var), _own(cv.ab_cov), _own(x), _own(w), _own(xs), _own(ws),
                    _own(items.expected_info_order, np.int64), _own(items.expected_info_bound))
    else:
        one = np.ones(1)
        expected = (zeros, zeros, zeros, one.copy(), one.copy(), one.copy(), one.copy(), np.zeros(0, dtype=np.int64),
                    zeros)
    return K.ReplayAdaptive(adaptive_code, _own(items.info_order, np.int64), _own(items.info_bound), g, h, g_order,
                            g_norm2, POSTERIOR_TOL, POSTERIOR_MAX_ITER, *expected)


class CompiledReplay:
    """The compiled replay of one session configuration (a fresh session's bank, selector, estimator
    and interval curve); build it with :meth:`for_session`. The kernels' arguments are built once:
    ``items``, ``estimator``, ``selection`` and ``adaptive`` (``catengine.session._replay_kernel``'s
    ``ReplayItems``, ``ReplayEstimator``, ``ReplaySelection``, ``ReplayAdaptive``)."""

    def __init__(self, session, selector_code: int, adaptive_code: int):
        est = session.estimator
        self.session = session
        self.ids = list(session.items.item_ids)
        self.lart = session.params.model.has_cot
        self.cot_offset = float(session.cot_offset)
        self.max_cot_length = float(session.max_cot_length)
        self.curve = session._responses.interval_curve if est.interval_calibration else None
        self.sd_scale = float(est.sd_scale)
        self.items = _items_of(session)
        self.estimator = _estimator_of(session)
        self.selection = _selection_of(session, selector_code)
        self.adaptive = _adaptive_of(session, adaptive_code)
        self._tables: dict[int, tuple] = {}

    @classmethod
    def for_session(cls, session) -> "CompiledReplay | None":
        """The compiled replay of ``session``'s configuration, or None when it is not one this
        module reproduces (the caller then steps sessions). ``session`` must be fresh (no answers)."""
        if session.exposure or session._responses.n or type(session.estimator) is not MAPEstimator:
            return None
        if session.params.model.kernel_code not in REPLAYED_MODELS:  # e.g. 4PL: no compiled replay path
            return None
        sel = session.selector
        if type(sel) is MaxFisherInformation:
            return cls(session, K.SELECT_MFI, K.ADAPTIVE_MFI)
        if type(sel) is PosteriorExpectedInformation and session.items.covariance is not None:
            return cls(session, K.SELECT_MFI, K.ADAPTIVE_EXPECTED_AB)
        if type(sel) is RandomisedSelection and sel.weight == "sqrt-variance":
            return cls(session, K.SELECT_RANDOMISED, K.ADAPTIVE_MFI)
        if type(sel) is DoublyRobustSelection and type(sel.design) is RandomisedSelection \
                and sel.design.weight == "sqrt-variance":
            adaptive = sel.adaptive_for(session.items)
            if type(adaptive) is MaxFisherInformation:
                return cls(session, K.SELECT_DOUBLY_ROBUST, K.ADAPTIVE_MFI)
            if type(adaptive) is PosteriorExpectedInformation and session.items.covariance is not None:
                return cls(session, K.SELECT_DOUBLY_ROBUST, K.ADAPTIVE_EXPECTED_AB)
            if type(adaptive) is ScoreFactorDOptimal and session.items.score_factors is not None:
                return cls(session, K.SELECT_DOUBLY_ROBUST, K.ADAPTIVE_SCORE_FACTOR_D)
        return None

    @classmethod
    def for_estimates(cls, session) -> "CompiledReplay | None":
        """A compiled replay of ``session``'s estimator alone, for :meth:`estimates_at` (any
        selector; None where the estimator or bank is not one this module reproduces)."""
        if session._responses.n or type(session.estimator) is not MAPEstimator:
            return None
        if session.params.model.kernel_code not in REPLAYED_MODELS:  # e.g. 4PL: no compiled replay path
            return None
        return cls(session, K.SELECT_MFI, K.ADAPTIVE_MFI)

    # ------------------------------------------------------------------ the SD factor by test length
    def _table(self, n: int) -> tuple:
        """(factor, interval_calibration text, z95) the estimator applies after ``n`` answers."""
        kept = self._tables.get(n)
        if kept is None:
            if self.sd_scale != 1.0:
                kept = (self.sd_scale, f"explicit sd_scale={self.sd_scale:g} (overrides any stored calibration)", None)
            elif self.curve is not None:
                kept = (self.curve.factor(n), self.curve.describe(n), self.curve.multiplier(n))
            else:
                kept = (1.0, "", None)
            self._tables[n] = kept
        return kept

    def log_cot_ready(self, cot_row) -> np.ndarray:
        """The CoT lengths a session would accept (NaN: unknown); ValueError naming the first item a
        session would refuse (``session._check_cot``)."""
        t = _own(cot_row)
        known = ~np.isnan(t)
        bad = known & ~((t >= 0) & (t <= self.max_cot_length) & (t + self.cot_offset >= MIN_LOG_ARGUMENT))
        if bad.any():
            j = int(np.flatnonzero(bad)[0])
            raise ValueError(f"CoT length {float(t[j])!r} of item {self.ids[j]!r} is outside the range a session "
                             f"accepts: 0 <= T <= {self.max_cot_length:g} and T + cot_offset >= {MIN_LOG_ARGUMENT:g} "
                             f"(cot_offset {self.cot_offset:g})")
        return t

    def run(self, correct_row, cot_row, steps: int, rng: np.random.Generator) -> ReplayRun:
        """Replay ``steps`` steps of a subject whose answers over the bank are ``correct_row``
        (0 / 1; negative: no answer, never proposed) and CoT lengths ``cot_row`` (None or NaN:
        unknown; ignored unless the bank is LaRT). The design draws take uniforms from ``rng`` as a
        session would, and leave it where the session would. Fewer steps when the answered items
        run out."""
        y = _own(correct_row)
        eligible = np.ascontiguousarray(y >= 0)
        L = int(min(steps, int(eligible.sum())))
        t = np.full(y.size, np.nan) if cot_row is None or not self.lart else self.log_cot_ready(cot_row)
        factors = np.array([self._table(n)[0] for n in range(L + 1)])
        bitgen = rng.bit_generator
        saved = bitgen.state
        uniforms = rng.random(L)
        bitgen.state = saved
        out = K.ReplayOutputs(np.empty(L, dtype=np.int64), np.empty((8, L + 1)), np.empty(L),
                              np.zeros(L, dtype=np.bool_))
        subject = K.ReplaySubject(y, t, eligible, factors, uniforms, L)
        done, used = K.replay_kernel(self.items, self.estimator, self.selection, self.adaptive, subject, out)
        rng.random(used)  # the generator ends where the session's draws leave it
        return ReplayRun(out.items[:done], out.estimates[:, : done + 1], out.criteria[:done], out.design[:done])

    def estimates_at(self, order, correct_row, cot_row, lengths) -> list[TraitEstimate]:
        """``CATSession.estimate_from`` of the first ``lengths[t]`` answers of ``order`` (bank
        indices in answer order; answers ``correct_row`` and CoT lengths ``cot_row`` over the bank,
        None or NaN: unknown) for each t, in one compiled call: the same estimates."""
        order, lengths = _own(order, np.int64), _own(lengths, np.int64)
        if lengths.size == 0 or np.any(np.diff(lengths) <= 0) or lengths[0] < 1 or lengths[-1] > order.size:
            raise ValueError(f"lengths must increase within 1..{order.size}, got {lengths.tolist()}")
        y = _own(correct_row)
        t = np.full(y.size, np.nan) if cot_row is None or not self.lart else self.log_cot_ready(cot_row)
        out = np.empty((8, lengths.size))
        K.estimates_at_lengths(self.items, self.estimator, t, np.array([self._table(int(L))[0] for L in lengths]),
                               order, y, lengths, out)
        return [self._estimate_of(out[:, k].tolist(), int(L)) for k, L in enumerate(lengths)]

    # ------------------------------------------------------------------ what a session would report
    def estimate(self, run: ReplayRun, n: int) -> TraitEstimate:
        """The session's estimate after ``n`` answers of ``run``."""
        return self._estimate_of(run.estimates[:, n].tolist(), n)

    def _estimate_of(self, column, n: int) -> TraitEstimate:
        theta, sd, tau, tau_sd, cov, fixed, n_iter, converged = column
        factor, text, z95 = self._table(n)
        lart = self.lart
        return TraitEstimate(
            theta=theta, theta_sd=sd, n_items=n, tau=tau if lart else None, tau_sd=tau_sd if lart else None,
            theta_tau_cov=cov if lart else None, method="map", n_iter=int(n_iter), converged=converged == 1.0,
            theta_sd_fixed_items=None if fixed != fixed else fixed, interval_factor=float(factor),
            interval_calibration=text, interval_z95=z95)

    def half_widths(self, run: ReplayRun) -> np.ndarray:
        """The 95% interval's upper half-width after each answer (``TraitEstimate.interval(0.95)``)."""
        theta, sd = run.estimates[0, 1:], run.estimates[1, 1:]
        z = np.array([self._table(n)[2] or _Z975 for n in range(1, run.steps + 1)])
        return (theta + z * sd) - theta

    def history(self, run: ReplayRun, correct_row, cot_row=None) -> tuple[StepRecord, ...]:
        """The session's history of ``run`` (``CATSession.history``)."""
        steps = run.steps
        theta, sd, tau, tau_sd = run.estimates[:4, 1:].tolist()
        items, criteria, design = run.items.tolist(), run.criteria.tolist(), run.design.tolist()
        answers = np.asarray(correct_row)[run.items].astype(int).tolist()
        cots = [None] * steps
        if self.lart and cot_row is not None:
            cots = [None if v != v else v for v in np.asarray(cot_row, dtype=np.float64)[run.items].tolist()]
        if not self.lart:
            tau = tau_sd = cots
        ids = self.ids
        out = []
        for n in range(steps):
            factor, _, z95 = self._table(n + 1)
            out.append(StepRecord(
                step=n + 1, item=ids[items[n]], correct=answers[n], cot_length=cots[n], theta=theta[n],
                theta_sd=sd[n], tau=tau[n], tau_sd=tau_sd[n], criterion=criteria[n], proposed=True,
                interval_z95=z95, interval_factor=float(factor), design=design[n],
                draw=DrawContext(n, (), self.estimate(run, n)) if design[n] else None))
        return tuple(out)
