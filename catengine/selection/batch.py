"""Batch-adaptive selection: k items proposed jointly, for harnesses that run items in parallel.

The batch is built by sequential greedy selection under a *fantasised* posterior. Slot 1 is
exactly the sequential engine's choice (same selector, same eligibility, same random draws). After
each chosen item j the posterior is updated by that item's **expected** information at the current
estimate, not by an answer (which is unknown): the mode stays where it is (the expected score of a
correctly specified item is zero) and the posterior precision grows,

    P  <-  P + diag(u_j, v_j) / s^2,     u_j = I_j(theta^) (Fisher information about theta),
                                          v_j = phi_j^2 / lam_j^2 (LaRT CoT information about tau,
                                                if the estimator uses CoT lengths; else 0),

with s the estimator's ``sd_scale`` (the reported covariance is s^2 times the model's). The
marginal log posterior of theta that posterior-weighted selectors see gains the matching Gaussian
term -dq (theta - theta^)^2 / 2, dq the increase of theta's marginal precision. The next slot is
then chosen by the same selector from the fantasised state, with the batch's earlier items counted
as administered (ineligible, and in the content-balance shares) and in ``responses.n``. Point-
information criteria (mfi, pei) ignore the posterior width, so for them the batch is their top k;
the LaRT precision criteria, pwi and kl take the fantasised precision into account (e.g. once the
batch pins tau down, CoT-rich items lose their edge). Exposure and content controls apply to every
slot, and Randomesque draws once per slot.

Numerics only: the session supplies the eligibility mask as a function of the batch so far.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import NamedTuple

import numpy as np

from catengine.estimation.base import TraitEstimate
from catengine.models import fisher_information
from catengine.selection.base import DrawContext, ItemSelector, ItemTable, SelectionState, check_k, is_design_draw


class BatchPick(NamedTuple):
    """One item of a batch: its bank ``index``, the selector's ``criterion`` value, whether it was a
    known-probability ``design`` draw (the criterion is then its probability given the batch's
    earlier items) and the ``context`` it was chosen from."""

    index: int
    criterion: float
    design: bool
    context: DrawContext


class _CountedResponses:
    """The session's ResponseState seen by a selector at a later batch slot: ``n`` counts the
    batch's earlier items as answered (KL's shrinking window, the replication mode's fixed items);
    everything else is the real state."""

    __slots__ = ("_state", "n", "answered")

    def __init__(self, state, n: int):
        self._state = state
        self.n = n
        self.answered = int(state.n)  # the answers actually known when the batch is chosen

    def __getattr__(self, name):
        return getattr(self._state, name)


def expected_information(items: ItemTable, theta: float, j: int, use_cot: bool) -> tuple[float, float]:
    """(u_j, v_j): item j's Fisher information about theta at ``theta`` and (LaRT, with CoT) about tau."""
    u = float(fisher_information(items.params, float(theta), np.array([j], dtype=np.int64))[0])
    v = float(items.cot_info[j]) if (items.cot_info is not None and use_cot) else 0.0
    return u, v


def fantasise(estimate: TraitEstimate, u: float, v: float, sd_scale: float = 1.0) -> tuple[TraitEstimate, float]:
    """The estimate after adding information diag(u, v) (model scale) to its precision, mode fixed.

    Returns (new estimate, dq): dq is the increase of theta's marginal precision on the model scale
    (what a log posterior without ``sd_scale`` gains)."""
    s2 = float(sd_scale) ** 2
    if estimate.tau is None:
        prec = s2 / estimate.theta_sd**2  # model-scale precision
        new_prec = prec + u
        return replace(estimate, theta_sd=math.sqrt(s2 / new_prec)), u
    cov = estimate.covariance() / s2  # model scale
    P = np.linalg.inv(cov)
    P_new = P + np.diag([u, v])
    cov_new = np.linalg.inv(P_new)
    dq = 1.0 / cov_new[0, 0] - 1.0 / cov[0, 0]
    cov_rep = cov_new * s2
    new = replace(estimate, theta_sd=math.sqrt(cov_rep[0, 0]), tau_sd=math.sqrt(cov_rep[1, 1]),
                  theta_tau_cov=float(cov_rep[0, 1]))
    return new, float(dq)


def _with_quadratic(log_posterior, theta0: float, q: float):
    if log_posterior is None:
        return None

    def fantasised(thetas):
        th = np.asarray(thetas, dtype=np.float64)
        return log_posterior(th) - 0.5 * q * (th - theta0) ** 2

    return fantasised


def select_batch(
    k: int,
    *,
    selector: ItemSelector,
    items: ItemTable,
    estimate: TraitEstimate,
    responses,
    log_posterior: Callable[[np.ndarray], np.ndarray] | None,
    eligible: Callable[[Sequence[int]], np.ndarray],
    rng: np.random.Generator,
    top_k: int = 1,
    use_cot: bool = True,
    sd_scale: float = 1.0,
    start: Sequence[BatchPick] = (),
) -> list[BatchPick]:
    """Up to ``k`` distinct items (:class:`BatchPick`), chosen jointly (see module docstring).

    ``eligible(chosen)``: the eligibility mask given the batch's items so far (they must be
    ineligible in it); ``start``: items already proposed that open the batch (e.g. a pending
    single proposal). Stops early when nothing is eligible any more. Slot 1 (with empty ``start``)
    performs exactly the sequential engine's selection. A selector that mixes in design draws
    (``is_design_draw``) makes them at the slots its schedule names, counting the batch's earlier
    items as answered; each such draw is a draw from the items still eligible, so its probability
    given the earlier slots is known (the pick's criterion).
    """
    k = check_k(k)
    params = items.params
    chosen: list[BatchPick] = []
    est = estimate
    extra_q = 0.0
    n0 = int(responses.n)

    def add(pick: BatchPick) -> None:
        nonlocal est, extra_q
        chosen.append(pick)
        if len(chosen) < k:
            u, v = expected_information(items, est.theta, pick.index, use_cot)
            est, dq = fantasise(est, u, v, sd_scale)
            extra_q += dq

    for pick in start:
        if len(chosen) < k:
            add(pick)
    while len(chosen) < k:
        mask = eligible([p.index for p in chosen])
        if chosen and not mask.any():
            break
        if chosen:
            state = SelectionState(est, mask, _CountedResponses(responses, n0 + len(chosen)), items,
                                   _with_quadratic(log_posterior, estimate.theta, extra_q))
        else:
            state = SelectionState(est, mask, responses, items, log_posterior)
        design = is_design_draw(selector, state)
        cand, vals = selector.candidates(params, state, rng, top_k)
        pick = int(rng.integers(cand.size)) if top_k > 1 and cand.size > 1 else 0
        j, crit = int(cand[pick]), float(vals[pick])
        if not mask[j]:  # a selector bug must never reach the user
            raise RuntimeError(f"selector {type(selector).__name__} proposed ineligible item index {j}")
        add(BatchPick(j, crit, design, DrawContext(n0, tuple(p.index for p in chosen), est)))
    return chosen


__all__ = ["BatchPick", "expected_information", "fantasise", "select_batch"]
