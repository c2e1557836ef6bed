"""The model-based prediction of the full-benchmark accuracy and CoT cost (docs/math.md §7.6).

With O the answered items (answers y_j), U the others, J = |O| + |U| and q the trait posterior as
the session reports it (Normal(theta^, SD^2); LaRT: the 2-D Normal of (theta, tau), whose marginals
are what accuracy and CoT length depend on), the full-benchmark accuracy is

    A = (1/J) [ sum_O y_j + sum_U y_j ],     y_j | theta, psi_j ~ Bernoulli(P_j(theta; psi_j)).

Conditioning on theta (law of total variance), with independent Gaussian posteriors of the items'
(a_j, b_j) (covariance Sigma_j = [[a_sd^2, ab_cov], [ab_cov, b_sd^2]]; absent entries are 0):

    pbar_j(theta)  = E_psi P_j(theta; psi_j)           (exact: z = a theta + b is Gaussian given theta)
    E[A | theta]   = (1/J) [ sum_O y_j + sum_U pbar_j(theta) ]
    Var[A | theta] = (1/J^2) sum_U pbar_j (1 - pbar_j)
    A^  = E_q E[A | theta],   Var(A) = E_q Var[A | theta] + Var_q E[A | theta].

Given theta, y_j is Bernoulli with a random success probability P_j(theta; psi_j), so its variance is
E_psi P(1 - P) + Var_psi P = pbar (1 - pbar): with independent item errors the item-parameter
uncertainty of the *unanswered* items changes the prediction only through pbar (it flattens the
response curves), not by an extra variance term. It widens the interval through the trait posterior
(the answered items' parameter errors, docs/math.md §7.3), i.e. through the SD the session reports.
The expectations over q use Gauss-Hermite nodes
theta_k = theta^ + SD x_k; the interval is the quantile range of the node mixture
sum_k w_k Normal(E[A | theta_k], Var[A | theta_k]) (it keeps the skew of the trait part), clipped
to the attainable range. The CoT total of a LaRT bank is the same computation with
T_j + offset ~ LogNormal(omega_j - phi_j tau, lam_j^2) given tau:

    E[T_j | tau] = exp(omega_j - phi_j tau + lam_j^2 / 2) - offset,
    Var[T_j | tau] = (exp(lam_j^2) - 1) exp(2 (omega_j - phi_j tau) + lam_j^2),

over the items whose CoT length was not recorded. Those two moments assume the bank's log-normal
residual of every LLM; real LLMs are far more regular than the pooled lam_j says (on MATH500 the
SD of an LLM's own log-length residuals is about half of lam_j, and the log-normal mean
overpredicted the total CoT tokens 1.6-fold). So, once at least ``MIN_SMEARING_ITEMS`` lengths are
recorded, the default ``residuals="smearing"`` replaces the factor exp(lam_j^2 / 2) by Duan's (1983)
smearing estimate from this LLM's own residuals e_k = log(T_k + offset) - (omega_k - phi_k tau^):

    E[T_j + offset | tau] = exp(omega_j - phi_j tau) m1,   m1 = mean_k exp(e_k),
    Var[T_j | tau]        = exp(2 (omega_j - phi_j tau)) (m2 - m1^2),   m2 = mean_k exp(2 e_k),

plus the sampling error of m1, which every unrecorded item shares (one common factor): the total's
variance gains (sum_U E[T_j + offset])^2 Var(exp(e)) / (n m1^2). The smearing factor is measured on
the recorded items: it assumes their residuals represent the others'. ``residuals="lognormal"``
keeps the model's own moments. Numpy/scipy on arrays, and compiled passes over the bank
(``catengine.scoring._kernels``) for the sums of :class:`SummedCurves` (no session, no I/O).
"""

from __future__ import annotations

import math
import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
from scipy.special import ndtri

from catengine.models.expected_information import gauss_hermite_normal
from catengine.models.params import ItemParams
from catengine.models.score_factors import product_nodes
from catengine.scoring.design import membership

DEFAULT_SCORE_NODES = 61
MIN_SMEARING_ITEMS = 5  # recorded CoT lengths below which the log-normal moments are used
#: the bank's log-residual variance counts as this many of an LLM's own residuals in :func:`residual_variance`
RESIDUAL_PRIOR_ITEMS = 10
RESIDUAL_MOMENTS = ("smearing", "lognormal")
MAX_BISECTIONS = 2200  # halvings of a mixture quantile's bracket: enough to reach adjacent floats from any width
#: trait values beyond +-TRAIT_LIMIT are scored at the limit (every item curve is saturated there)
TRAIT_LIMIT = 1e6

@dataclass(frozen=True)
class GroupPrediction:
    """One group's (the whole bank, or one category) predicted total with its spread.

    ``mean``/``sd`` of the total (sum over the group's items), ``low``/``high`` its interval,
    ``n_observed`` items whose outcome is known, ``n_items`` items in the group.
    """

    mean: float
    sd: float
    low: float
    high: float
    n_observed: int
    n_items: int


def z_quantile(level: float) -> float:
    """Two-sided normal quantile for a central interval at ``level``."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must lie in (0, 1), got {level!r}")
    return float(ndtri(0.5 + level / 2.0))


def _item_index(items):
    """An index into per-item arrays: every item (None), a slice, or integer indices."""
    if items is None:
        return slice(None)
    return items if isinstance(items, slice) else np.asarray(items)


def response_and_slope(params: ItemParams, theta: np.ndarray, items=None) -> tuple[np.ndarray, np.ndarray]:
    """P_j(theta) and dP_j/dz (z = a theta + b) for nodes ``theta`` (K,) and items: shapes (K, n)."""
    return params.model.response_and_slope(params, theta, items)


def item_averaged_response(params: ItemParams, theta: np.ndarray, a_sd=None, b_sd=None, ab_cov=None,
                           n_nodes: int = 9, items=None) -> np.ndarray:
    """E_psi P_j(theta; psi_j) over a Gaussian posterior of each item's (a_j, b_j), shape (K, n).

    At a fixed theta, z = a theta + b is Normal(a^ theta + b^, v) with v = theta^2 a_sd^2 +
    2 theta ab_cov + b_sd^2, so the average is one-dimensional (``params.model.averaged_probability``):
    Phi(mu / sqrt(1 + v)) for the probit (LaRT) response, ``n_nodes``-point Gauss-Hermite in z for
    the logistic ones. ``items``: indices of the items (default: every item; ``a_sd``... hold one
    entry per bank item).
    """
    idx = _item_index(items)
    a, b = params.a[idx], params.b[idx]
    theta = np.asarray(theta, dtype=np.float64)
    zero = np.zeros(a.size)
    a_var = zero if a_sd is None else np.asarray(a_sd, dtype=np.float64)[idx] ** 2
    b_var = zero if b_sd is None else np.asarray(b_sd, dtype=np.float64)[idx] ** 2
    cov = zero if ab_cov is None else np.asarray(ab_cov, dtype=np.float64)[idx]
    v = np.maximum(theta[:, None] ** 2 * a_var + 2.0 * theta[:, None] * cov + b_var, 0.0)  # (K, n)
    mu = theta[:, None] * a[None, :] + b[None, :]
    return params.model.averaged_probability(params, mu, v, items, n_nodes)


def response(params: ItemParams, theta: np.ndarray, items=None) -> np.ndarray:
    """P_j(theta) for nodes ``theta`` (K,) and items (default: every item): shape (K, n)."""
    return params.model.probability(params, theta, items)


_EXPECTED_KEPT = 4
_expected_kept: OrderedDict = OrderedDict()
_expected_lock = threading.Lock()


#: the traits of the hypotheses behind the design estimate's test-inverted interval
#: (:func:`hypothesis_family`): every 0.25 from -8 to 12
HYPOTHESIS_THETAS = np.linspace(-8.0, 12.0, 81)

#: the largest bank whose accuracy interval inverts the test of each hypothesis; each design draw
#: then costs a pass over the bank per hypothesis, and larger banks keep the pooled variance
HYPOTHESIS_ITEMS = 20_000

_family_kept: OrderedDict = OrderedDict()


def hypothesis_family(params: ItemParams) -> np.ndarray:
    """(K, J) read-only: the bank's answer probabilities P_j(theta) at each of the
    ``HYPOTHESIS_THETAS``: the hypotheses "the subject answers as the bank's model at theta" whose
    accuracies the design estimate's interval tests (``catengine.scoring.design.hypothesis_sums``).
    The last few banks' are kept, keyed by the parameters (the object)."""
    key = id(params)
    with _expected_lock:
        kept = _family_kept.get(key)
        if kept is not None and kept[0]() is params:
            _family_kept.move_to_end(key)
            return kept[1]
    out = np.ascontiguousarray(response(params, HYPOTHESIS_THETAS), dtype=np.float64)
    out.flags.writeable = False
    with _expected_lock:
        _family_kept[key] = (weakref.ref(params), out)
        while len(_family_kept) > 2:
            _family_kept.popitem(last=False)
    return out


def expected_probabilities(params: ItemParams, theta: float, theta_sd: float, n_nodes: int = 21) -> np.ndarray:
    """E_q P_j(theta) for every item under q = Normal(theta, theta_sd^2), shape (J,), read-only:
    in closed form for probit (LaRT) items, E Phi(a X + b) = Phi((a theta + b) / sqrt(1 + a^2
    theta_sd^2)); by ``n_nodes``-point Gauss-Hermite quadrature for logistic items.

    The last few results are kept, keyed by the bank's parameters (the object), theta, theta_sd and
    n_nodes: the randomised selector computes this row at a design draw, and the design-based
    score needs the same row of the same posterior when the draw's answer is recorded."""
    key = (id(params), float(theta), float(theta_sd), int(n_nodes))
    with _expected_lock:
        kept = _expected_kept.get(key)
        if kept is not None and kept[0]() is params:
            _expected_kept.move_to_end(key)
            return kept[1]
    out = _expected_response(params, float(theta), float(theta_sd), n_nodes)
    out.flags.writeable = False
    with _expected_lock:
        _expected_kept[key] = (weakref.ref(params), out)
        _expected_kept.move_to_end(key)
        while len(_expected_kept) > _EXPECTED_KEPT:
            _expected_kept.popitem(last=False)
    return out


def _expected_response(params: ItemParams, theta: float, theta_sd: float, n_nodes: int) -> np.ndarray:
    closed = params.model.expected_probability_closed_form(params, theta, theta_sd)  # probit: exact
    if closed is not None:
        return closed
    from catengine.scoring import _kernels

    x, w = gauss_hermite_normal(n_nodes)
    if params.model.link != "logistic":  # no compiled pass for this curve: the model's own P at the nodes
        return w @ params.model.probability(params, theta + theta_sd * x)
    out = np.empty(params.n_items)
    four = params.model.has_asymptotes  # one compiled pass (catengine.scoring._kernels.expected_logistic)
    _kernels.expected_logistic(theta, theta_sd, x, w, params.a, params.b,
                               params.c if four else params.a, params.d if four else params.a, four, out)
    return out


def expected_cot_lengths(params: ItemParams, tau: float, tau_sd: float, cot_offset: float) -> np.ndarray:
    """E_q E[T_j | tau] for every item under q = Normal(tau, tau_sd^2) (closed form), shape (J,)."""
    return params.model.expected_cot_length(params, tau, tau_sd, cot_offset)


def cot_draw_sums(params: ItemParams, tau: float, cot_offset: float, probabilities, remaining, item: int, *,
                  codes=None, n_groups: int = 0):
    """One design draw's :class:`~catengine.scoring.design.DrawSums` of the CoT tokens (LaRT banks):
    f the expected lengths at the plug-in tau (``expected_cot_lengths(params, tau, 0, cot_offset)``)
    and, in place of Var y, the variance scale exp(2 (omega_j - phi_j tau)) (the smeared variance of
    the design's CoT floor is this times one factor of the session's own residuals). One compiled
    pass over the bank, without (J,) temporaries."""
    from catengine.scoring import _kernels
    from catengine.scoring.design import DrawSums, _checked_codes

    if not params.model.has_cot:
        raise ValueError(f"CoT totals need a lart bank, not {params.response_model!r}")
    J = params.n_items
    pi = np.ascontiguousarray(probabilities, dtype=np.float64).reshape(-1)
    rem = np.ascontiguousarray(remaining, dtype=bool).reshape(-1)
    if pi.shape != (J,) or rem.shape != (J,):
        raise ValueError(f"probabilities and remaining must hold one value per item ({J})")
    codes, n_groups = _checked_codes(codes, n_groups, J)
    kernel_codes = np.zeros(J, dtype=np.int64) if codes is None else np.ascontiguousarray(codes, dtype=np.int64)
    omega, phi, smear = _cot_arrays(params)
    sums = _kernels.cot_draw_sums(omega, phi, smear, float(tau), float(cot_offset), pi, rem, kernel_codes,
                                  1 + n_groups)
    j = int(item)
    drawn = math.exp(float(omega[j]) - float(phi[j]) * float(tau)) * float(smear[j]) - cot_offset
    return DrawSums(predicted=sums[0], variance=sums[1], square=sums[2], drawn=drawn)


_cot_kept: dict = {}


def _cot_arrays(params: ItemParams):
    """(omega, phi, exp(lam^2 / 2)) of a LaRT bank as contiguous arrays, kept per parameter object."""
    kept = _cot_kept.get(id(params))
    if kept is not None and kept[0]() is params:
        return kept[1]
    arrays = (np.ascontiguousarray(params.omega, dtype=np.float64), np.ascontiguousarray(params.phi, dtype=np.float64),
              np.exp(0.5 * np.asarray(params.lam, dtype=np.float64) ** 2))
    with _expected_lock:
        for key in [k for k, v in _cot_kept.items() if v[0]() is None]:
            del _cot_kept[key]
        _cot_kept[id(params)] = (weakref.ref(params), arrays)
    return arrays


def _check_sd_array(name, values, n):
    if values is None:
        return None
    arr = np.asarray(values, dtype=np.float64)
    if arr.shape != (n,) or not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must hold one finite value per item ({n}), got shape {arr.shape}")
    if name != "ab_cov" and np.any(arr < 0):
        raise ValueError(f"{name} (a posterior SD) has negative entries, first at item index {int(np.flatnonzero(arr < 0)[0])}")
    return arr


def _mixture_intervals(weights, means, variances, level, lo_bound, hi_bound):
    """Central intervals of the mixtures sum_k w_k Normal(means[k, g], variances[k, g]), one per
    column g, by bisection on the mixture CDF, clipped to [lo_bound[g], hi_bound[g]]."""
    alpha = 0.5 - level / 2.0
    # nodes whose weight is below a float's resolution of the tail probability cannot move the
    # quantiles: the bracket and the CDF use the others
    keep = weights >= 1e-16 * alpha * weights.max()
    weights, means = weights[keep], means[keep]
    sds = np.sqrt(np.maximum(variances[keep], 0.0))  # (K, G)
    from catengine.scoring import _kernels

    inverse = 1.0 / np.where(sds > 0, sds, 1.0)
    span = 10.0 * sds.max(axis=0) + 1e-12
    lo = np.broadcast_to(means.min(axis=0) - span, (2, means.shape[1])).copy()
    hi = np.broadcast_to(means.max(axis=0) + span, (2, means.shape[1])).copy()
    # to adjacent floats (compiled: every bracket in one loop): the result does not depend on the bracket
    _kernels.mixture_bisection(np.ascontiguousarray(weights, dtype=np.float64), np.ascontiguousarray(means),
                               np.ascontiguousarray(inverse), np.ascontiguousarray(~(sds > 0)),
                               np.array([alpha, 1.0 - alpha]), lo, hi, MAX_BISECTIONS)
    q = np.clip(0.5 * (lo + hi), lo_bound[None, :], hi_bound[None, :])
    return q[0], q[1]


def _groups(codes, n_groups, J):
    if codes is None:
        return np.zeros(J, dtype=np.int64), 0
    codes = np.asarray(codes, dtype=np.int64)
    if codes.shape != (J,) or codes.min(initial=0) < 0 or codes.max(initial=0) >= n_groups:
        raise ValueError(f"category codes must hold one integer in 0..{n_groups - 1} per item ({J})")
    return codes, int(n_groups)


def _predict_groups(weights, cond_mean, cond_var, known_sum, n_known, n_unknown, member, level, unit_bound,
                    common=None, common_rel_var=0.0, intervals=True, point_mean=None):
    """Per group (columns of ``member``, (J, G) 0/1) the GroupPrediction of the total.

    ``cond_mean`` (K, J) and ``cond_var`` (K, J): each unknown item's conditional mean and variance
    at each node (0 for known items); ``known_sum`` (G,) the known part of each group's total;
    ``unit_bound``: the largest value of one unknown item (1 for answers, inf for CoT lengths);
    ``common`` (K, J) and ``common_rel_var``: a factor shared by the unknown items, each item's part
    ``common`` scaled by one factor of relative variance ``common_rel_var`` (adds
    common_rel_var (sum over the group of common)^2 to each node's variance). ``intervals=False``
    skips the mixture quantiles (``low``/``high`` NaN): the mean and SD alone, for bulk checks;
    ``intervals="normal"``: mean +- z SD instead of the mixture quantiles, clipped to the same range.
    ``point_mean`` (J,): each unknown item's prediction at a point of the posterior (0 for known
    items); the reported mean is then that plug-in total and the SD its root mean square error
    under the posterior, sqrt(Var + (posterior mean - plug-in)^2) (``intervals="normal"`` only).
    """
    return predict_from_sums(weights, cond_mean @ member, cond_var @ member, known_sum, n_known, n_unknown, level,
                             unit_bound, None if common is None else common @ member, common_rel_var, intervals,
                             None if point_mean is None else point_mean @ member)


def predict_from_sums(weights, mean_sums, var_sums, known_sum, n_known, n_unknown, level, unit_bound,
                      common_sums=None, common_rel_var=0.0, intervals=True, point_sums=None):
    """The GroupPredictions from the unknown items' sums per node and group (what
    :func:`_predict_groups` reduces its (K, J) arrays to): ``mean_sums`` (K, G), ``var_sums`` (K, G)
    the sums of the conditional means and variances, ``common_sums`` (K, G) of the common factor's
    parts, ``point_sums`` (G,) of the plug-in predictions; the other arguments as there."""
    m = mean_sums + known_sum[None, :]  # (K, G)
    v = var_sums
    if common_sums is not None and common_rel_var > 0.0:
        v = v + common_rel_var * common_sums ** 2
    mean = weights @ m
    var = weights @ v + weights @ (m - mean[None, :]) ** 2
    if point_sums is not None:
        if intervals not in ("normal", False):
            raise ValueError("a plug-in centre (point_mean) takes the normal interval or none")
        point = point_sums + known_sum
        var = var + (mean - point) ** 2
        mean = point
    hi_bound = known_sum + np.where(n_unknown > 0, unit_bound * np.maximum(n_unknown, 1.0), 0.0)  # no inf * 0
    if intervals == "normal":
        z = z_quantile(level)
        sd = np.sqrt(np.maximum(var, 0.0))
        low, high = np.clip(mean - z * sd, known_sum, hi_bound), np.clip(mean + z * sd, known_sum, hi_bound)
    elif intervals:
        low, high = _mixture_intervals(weights, m, v, level, known_sum, hi_bound)
    else:
        low = high = np.full(m.shape[1], math.nan)
    # the mean lies in the attainable range (beyond it only by rounding), and the interval holds it:
    # with near-certain predictions a mixture with one far node of tiny weight has its mean beyond
    # both central quantiles. Adding 0.0 turns a negative zero (a clip at 0 keeps -0.0) into 0.0.
    mean = np.clip(mean, known_sum, hi_bound) + 0.0
    if intervals:
        low, high = np.minimum(low, mean) + 0.0, np.maximum(high, mean) + 0.0
    out = []
    for g in range(m.shape[1]):
        out.append(GroupPrediction(float(mean[g]), math.sqrt(max(float(var[g]), 0.0)), float(low[g]), float(high[g]),
                                   int(n_known[g]), int(n_known[g] + n_unknown[g])))
    return out


def _non_negative(name, value):
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")


def _checked_observations(observed, values, centre, sd, *, what, trait):
    """The answered items' indices and values as flat arrays of one length, and a finite trait
    posterior (mean ``centre``, SD ``sd`` >= 0), or a ValueError naming what is wrong."""
    observed = np.asarray(observed, dtype=np.int64).reshape(-1)
    values = np.asarray(values, dtype=np.float64).reshape(-1)
    if observed.shape != values.shape:
        raise ValueError(f"{observed.size} {what} but {values.size} values")
    if not (math.isfinite(centre) and math.isfinite(sd) and sd >= 0):
        raise ValueError(f"the {trait} posterior must have a finite mean and SD >= 0, got {centre}, SD={sd}")
    return observed, values


def _known_and_nodes(params, observed, values, centre, sd, *, what, trait, codes, n_groups, n_nodes, excluded=()):
    """The shared start of both predictions: checked inputs, the unknown-item mask (neither observed
    nor ``excluded``) and the Gauss-Hermite nodes of the trait posterior Normal(centre, sd^2)."""
    J = params.n_items
    observed, values = _checked_observations(observed, values, centre, sd, what=what, trait=trait)
    codes, n_groups = _groups(codes, n_groups, J)
    unknown = np.ones(J, dtype=bool)
    unknown[observed] = False
    unknown[_excluded(excluded, observed, J)] = False
    x, w = gauss_hermite_normal(n_nodes)
    return observed, values, codes, n_groups, unknown, float(centre) + float(sd) * x, w


def _group_totals(w, cond_mean, cond_var, observed, values, unknown, codes, n_groups, level, unit_bound,
                  common, rel_var, intervals, point_mean=None):
    """The shared end of both predictions: known sums and item counts per group (the items neither
    observed nor unknown, excluded, count in neither), then the mixture."""
    J = unknown.size
    member = membership(codes, n_groups, J)
    known_sum = np.zeros(J)
    known_sum[observed] = values
    answered = np.zeros(J)
    answered[observed] = 1.0
    return _predict_groups(w, cond_mean, cond_var, known_sum @ member, answered @ member,
                           unknown.astype(float) @ member, member, level, unit_bound, common, rel_var, intervals,
                           point_mean)


def predict_accuracy(params: ItemParams, theta: float, theta_sd: float, observed, correct, *, level: float = 0.95,
                     codes=None, n_groups: int = 0, a_sd=None, b_sd=None, ab_cov=None, residual_sd: float = 0.0,
                     n_nodes: int = DEFAULT_SCORE_NODES, intervals: bool = True, excluded=()) -> list[GroupPrediction]:
    """Predicted number correct over the bank (entry 0) and over each category (entries 1..G).

    ``observed``: indices of the answered items; ``correct``: their 0/1 answers; ``codes`` (J,) the
    category of each item (``n_groups`` categories; None: no categories); ``a_sd``, ``b_sd``,
    ``ab_cov``: the bank's item-parameter uncertainty (None = absent); ``residual_sd``: the
    cross-fitted misfit delta per unanswered item (``catengine.scoring.calibration``), which adds
    (delta n_U)^2 to the variance of each group's total. Divide by ``n_items`` for accuracies.
    ``excluded``: items (none answered) left out of the prediction and of ``n_items``.
    """
    _non_negative("residual_sd", residual_sd)
    J = params.n_items
    observed, correct, codes, n_groups, unknown, nodes, w = _known_and_nodes(
        params, observed, correct, theta, theta_sd, what="observed items", trait="trait (theta)", codes=codes,
        n_groups=n_groups, n_nodes=n_nodes, excluded=excluded)
    a_sd, b_sd, ab_cov = (_check_sd_array(n, v, J) for n, v in (("a_sd", a_sd), ("b_sd", b_sd), ("ab_cov", ab_cov)))
    if a_sd is None and b_sd is None and ab_cov is None:
        p, _ = response_and_slope(params, nodes)
    else:
        p = item_averaged_response(params, nodes, a_sd, b_sd, ab_cov)
    cond_var = p * (1.0 - p)
    cond_mean = p * unknown
    cond_var = np.maximum(cond_var, 0.0) * unknown
    common = np.broadcast_to(unknown * float(residual_sd), cond_mean.shape) if residual_sd > 0 else None
    return _group_totals(w, cond_mean, cond_var, observed, correct, unknown, codes, n_groups, level, 1.0,
                         common, 1.0, intervals)


SCORE_FACTOR_NODES = {1: 41, 2: 11, 3: 5}  # Gauss-Hermite nodes per factor, by number of factors d (n^d nodes)


SCORE_FACTOR_CENTRES = ("mode", "mean")


def predict_accuracy_factors(factors, observed, correct, *, level: float = 0.95, codes=None, n_groups: int = 0,
                             residual_sd: float = 0.0, n_nodes: int | None = None,
                             intervals: bool = True, centre: str = "mode", excluded=()) -> list[GroupPrediction]:
    """:func:`predict_accuracy` under the bank's score factors (``catengine.models.score_factors``).

    The trait posterior q is the Laplace approximation Normal(mode, S) of the factor posterior
    given the answers; the expectations over q use n_nodes^d Gauss-Hermite product nodes; the
    conditional Bernoulli moments of the unanswered items, the law of total variance and
    ``residual_sd`` are as for the bank's own one-trait model. ``centre="mode"`` (the default)
    reports the plug-in total at the posterior mode, sum_O y_j + sum_U P_j(mode), with the SD its
    root mean square error under q (the variance plus the squared gap to the posterior mean); the
    loadings are joint-MAP estimates fitted with point traits, and on MATH500 this plug-in had a
    smaller error than the posterior mean at 10, 25 and 50 items on every one of six LLM fold
    partitions (docs/score_prediction.md §2). ``centre="mean"``: the posterior mean and SD.
    The interval is centre +- z SD, clipped to the attainable range: a mixture over a product grid
    of a few nodes per factor has lumpy quantiles (its tails sit on single nodes), and the score
    check that makes the interval honest matches the coverage of exactly this normal interval
    (``calibration.heldout.score_curves``). ``n_nodes``: nodes per factor (None:
    ``SCORE_FACTOR_NODES[d]``; 41 / 11 / 5 keep the cost near 100-200 nodes). ``excluded``: items
    (bank indices, none answered) that the prediction leaves out: it is the accuracy over the others."""
    _non_negative("residual_sd", residual_sd)
    if centre not in SCORE_FACTOR_CENTRES:
        raise ValueError(f"centre must be one of {SCORE_FACTOR_CENTRES}, got {centre!r}")
    J = factors.n_items
    observed = np.asarray(observed, dtype=np.int64).reshape(-1)
    correct = np.asarray(correct, dtype=np.float64).reshape(-1)
    if observed.shape != correct.shape:
        raise ValueError(f"{observed.size} observed items but {correct.size} values")
    codes, n_groups = _groups(codes, n_groups, J)
    unknown = np.ones(J, dtype=bool)
    unknown[observed] = False
    unknown[_excluded(excluded, observed, J)] = False
    answered = np.zeros(J)
    answered[observed] = 1.0
    mode, cov = factors.posterior(observed, correct)
    nodes, w = product_nodes(mode, cov, SCORE_FACTOR_NODES[factors.dims] if n_nodes is None else n_nodes)
    from catengine.scoring import _kernels

    # the unknown items' sums per node and group in one compiled pass (no (nodes, items) arrays)
    member = membership(codes, n_groups, J)
    n_cols = 1 + n_groups
    kernel_codes = np.zeros(J, np.int64) if codes is None else np.ascontiguousarray(codes, dtype=np.int64)
    u = unknown.astype(np.float64)
    mean_sums, var_sums = np.empty((nodes.shape[0], n_cols)), np.empty((nodes.shape[0], n_cols))
    _kernels.factor_node_sums(np.ascontiguousarray(nodes), factors.loadings_t, factors.intercepts, u, kernel_codes,
                              n_cols, mean_sums, var_sums)
    point_sums = None
    if centre == "mode":
        point_sums, scratch = np.empty((1, n_cols)), np.empty((1, n_cols))
        _kernels.factor_node_sums(np.ascontiguousarray(mode[None, :]), factors.loadings_t, factors.intercepts, u,
                                  kernel_codes, n_cols, point_sums, scratch)
        point_sums = point_sums[0]
    known_sum = np.zeros(J)
    known_sum[observed] = correct
    n_unknown = u @ member
    common_sums = np.broadcast_to(float(residual_sd) * n_unknown, mean_sums.shape) if residual_sd > 0 else None
    return predict_from_sums(w, mean_sums, var_sums, known_sum @ member, answered @ member, n_unknown, level, 1.0,
                             common_sums, 1.0, "normal" if intervals else False, point_sums)


def predict_accuracy_factors_at_lengths(factors, observed, correct, lengths, residual_sds=None) -> tuple[np.ndarray, np.ndarray]:
    """:func:`predict_accuracy_factors` for the whole bank after each of ``lengths`` answers of one
    answer sequence (``observed`` bank indices and ``correct`` 0/1 in answer order; ``lengths``
    increasing, at most its length), centre "mode", mean and SD only: (accuracy, sd) per length on
    the accuracy scale, ``residual_sds`` the ``residual_sd`` at each (None: 0). One compiled call
    (``_kernels.factor_score_trajectory``) instead of one prediction per length: the score check
    asks for nine lengths of every replayed session."""
    from catengine.models.score_factors import POSTERIOR_MAX_ITER, POSTERIOR_TOL, standard_product_grid
    from catengine.scoring import _kernels

    # writable copies: the kernel is compiled once for every caller (read-only arrays compile apart)
    observed = np.array(observed, dtype=np.int64).reshape(-1)
    correct = np.array(correct, dtype=np.float64).reshape(-1)
    lengths = np.array(lengths, dtype=np.int64).reshape(-1)
    if observed.shape != correct.shape:
        raise ValueError(f"{observed.size} observed items but {correct.size} values")
    if lengths.size == 0 or np.any(np.diff(lengths) <= 0) or lengths[0] < 0 or lengths[-1] > observed.size:
        raise ValueError(f"lengths must increase within 0..{observed.size}, got {lengths.tolist()}")
    residual_sds = np.zeros(lengths.size) if residual_sds is None else np.array(residual_sds, dtype=np.float64)
    for r in residual_sds:
        _non_negative("residual_sd", float(r))
    grid, weights = standard_product_grid(SCORE_FACTOR_NODES[factors.dims], factors.dims)
    mean, var = np.empty(lengths.size), np.empty(lengths.size)
    _kernels.factor_score_trajectory(factors.loadings, factors.loadings_t, factors.intercepts, observed, correct,
                                     lengths, residual_sds, grid, weights, POSTERIOR_TOL, POSTERIOR_MAX_ITER, mean, var)
    J = factors.n_items
    return mean / J, np.sqrt(np.maximum(var, 0.0)) / J


def predict_cot_total_at_lengths(params: ItemParams, taus, tau_sds, observed, cot_tokens, lengths, *, cot_offset: float,
                                 log_extra_sds=None, n_nodes: int = DEFAULT_SCORE_NODES) -> tuple[np.ndarray, np.ndarray] | None:
    """:func:`predict_cot_total_from_curves` for the whole bank (smeared residuals, mean and SD
    only) after each of ``lengths`` answers of one answer sequence whose CoT lengths are all
    recorded (``observed`` bank indices and ``cot_tokens`` in answer order; ``lengths``
    increasing), at each length's speed posterior Normal(taus[t], tau_sds[t]^2) with the extra
    log-SD ``log_extra_sds[t]`` (None: 0): (mean, sd) per length, in tokens. One compiled call
    (``_kernels.cot_total_trajectory``) summing the bank's items directly, as
    :meth:`SummedCurves.unknown_sums` does on a bank of at most ``DIRECT_SUM_CELLS`` items times
    nodes; None on a larger bank (predict each length with :func:`predict_cot_total_from_curves`)."""
    from catengine.scoring import _kernels

    if not params.model.has_cot:
        raise ValueError(f"CoT totals need a lart bank, not {params.response_model!r}")
    if params.n_items * int(n_nodes) > DIRECT_SUM_CELLS:
        return None
    lengths = np.array(lengths, dtype=np.int64).reshape(-1)
    observed, tokens = _checked_observations(observed, cot_tokens, float(taus[0]), float(tau_sds[0]),
                                             what="items with CoT lengths", trait="speed (tau)")
    if observed.size and (observed.min() < 0 or observed.max() >= params.n_items or np.unique(observed).size != observed.size):
        raise ValueError(f"items with CoT lengths must be distinct item indices in 0..{params.n_items - 1}")
    if lengths.size == 0 or np.any(np.diff(lengths) <= 0) or lengths[0] < 0 or lengths[-1] > observed.size:
        raise ValueError(f"lengths must increase within 0..{observed.size}, got {lengths.tolist()}")
    taus, tau_sds = (np.array(v, dtype=np.float64).reshape(-1) for v in (taus, tau_sds))
    extra = np.zeros(lengths.size) if log_extra_sds is None else np.array(log_extra_sds, dtype=np.float64)
    if not (taus.size == tau_sds.size == extra.size == lengths.size):
        raise ValueError(f"{lengths.size} lengths need as many taus, tau SDs and extra log-SDs")
    if not (np.all(np.isfinite(taus)) and np.all(np.isfinite(tau_sds)) and np.all(tau_sds >= 0)):
        raise ValueError("the speed posteriors need finite taus and SDs >= 0")
    for value in extra:
        _non_negative("log_extra_sd", float(value))
    x, w = gauss_hermite_normal(n_nodes)
    mean, var = np.empty(lengths.size), np.empty(lengths.size)
    _kernels.cot_total_trajectory(*(np.ascontiguousarray(v, dtype=np.float64) for v in (params.omega, params.phi, params.lam)),
                                  np.array(observed, dtype=np.int64), np.array(tokens, dtype=np.float64), lengths,
                                  taus, tau_sds,
                                  extra, np.ascontiguousarray(x), np.ascontiguousarray(w), float(cot_offset),
                                  MIN_SMEARING_ITEMS, mean, var)
    return mean, np.sqrt(np.maximum(var, 0.0))


def residual_variance(params: ItemParams, tau: float, observed, cot_tokens, cot_offset: float,
                      prior_items: float = RESIDUAL_PRIOR_ITEMS) -> float:
    """Var(exp(e)) of one LLM's log-length residuals e (its lengths' spread around the model's median
    exp(omega_j - phi_j tau), as a factor of exp(2 (omega_j - phi_j tau))), for the design-based CoT
    total's variance (docs/math.md §7.8): the larger of

    * the log-normal variance exp(s^2) (exp(s^2) - 1) of a pooled residual variance, at most the bank's,

          s^2 = min( (k L + sum_k (e_k - ebar)^2) / (k + max(n - 1, 0)),  L ),     L = mean_j lam_j^2,

      the posterior mean of a normal variance under a scaled inverse chi-square prior of k =
      ``prior_items`` degrees of freedom centred on the bank's (the mean estimated), and
    * the LLM's own empirical variance of exp(e_k) (the smearing moments, :func:`smearing_moments`),

    with e_k = log(T_k + offset) - (omega_k - phi_k tau) over the n recorded items. The empirical
    variance alone rests on the few lengths a short test has recorded: it misses the long answers
    the test has not met, and is small exactly when the total is underestimated. The log-normal
    variance carries the tail a variance implies, and the bank's figure keeps a short test from
    resting on a handful of residuals; it is capped at the bank's, since lengths are bounded by the
    generation limit and a log-residual variance inflated by empty or truncated answers (an LLM
    with many zero-length answers has one of 16 on MATH-500) would give a log-normal tail of lengths
    no LLM writes. An LLM whose recorded lengths do spread more than that keeps its own variance."""
    k = float(prior_items)
    if not (math.isfinite(k) and k > 0.0):
        raise ValueError(f"prior_items must be a finite number > 0, got {prior_items!r}")
    e = log_residuals(params, tau, observed, cot_tokens, cot_offset)
    bank = float(np.mean(np.asarray(params.lam, dtype=np.float64) ** 2))
    spread = float(np.sum((e - e.mean()) ** 2)) if e.size else 0.0
    s2 = min((k * bank + spread) / (k + max(e.size - 1, 0)), bank)
    own = float(np.var(np.exp(np.minimum(e, 300.0)))) if e.size else 0.0  # exp(300)^2 stays finite
    return max(math.exp(s2) * math.expm1(s2), own)


def log_residuals(params: ItemParams, tau: float, observed, cot_tokens, cot_offset: float) -> np.ndarray:
    """e_k = log(T_k + offset) - (omega_k - phi_k tau) over the recorded items ``observed`` (bank
    indices) with CoT lengths ``cot_tokens``: an LLM's log-length residuals at speed ``tau``."""
    observed = np.asarray(observed, dtype=np.int64).reshape(-1)
    tokens = np.asarray(cot_tokens, dtype=np.float64).reshape(-1)
    if observed.shape != tokens.shape:
        raise ValueError(f"observed and cot_tokens must have one entry per recorded item, got {observed.size} and {tokens.size}")
    return np.log(tokens + cot_offset) - (params.omega[observed] - params.phi[observed] * float(tau))


def smearing_moments(params: ItemParams, tau: float, observed, cot_tokens, cot_offset: float):
    """(m1, m2, n) of exp(e_k), e_k the :func:`log_residuals`, over the recorded items (see the
    module docstring)."""
    e = np.exp(log_residuals(params, tau, observed, cot_tokens, cot_offset))
    return float(e.mean()), float(np.mean(e * e)), int(e.size)


def predict_cot_total(params: ItemParams, tau: float, tau_sd: float, observed, cot_tokens, *, cot_offset: float,
                      level: float = 0.95, codes=None, n_groups: int = 0, residuals: str = "smearing",
                      log_extra_sd: float = 0.0, n_nodes: int = DEFAULT_SCORE_NODES,
                      intervals: bool = True, excluded=()) -> list[GroupPrediction]:
    """Predicted total CoT tokens over the bank (entry 0) and each category, LaRT banks only
    (``excluded``: items, none with a recorded length, left out of the total).

    ``observed``: indices of items whose CoT length was recorded, ``cot_tokens`` those lengths; the
    other items are predicted from the model under q = Normal(tau, tau_sd^2), with the LLM's own
    smeared residuals (``residuals="smearing"``, the default, once ``MIN_SMEARING_ITEMS`` lengths
    are recorded) or the bank's log-normal ones (``"lognormal"``); see the module docstring.
    ``log_extra_sd``: the cross-fitted multiplicative misfit s (``catengine.scoring.calibration``):
    the unrecorded part is scaled by a mean-1 log-normal factor of log-SD s.
    """
    if residuals not in RESIDUAL_MOMENTS:
        raise ValueError(f"residuals must be one of {RESIDUAL_MOMENTS}, got {residuals!r}")
    _non_negative("log_extra_sd", log_extra_sd)
    if not params.model.has_cot:
        raise ValueError(f"CoT totals need a lart bank, not {params.response_model!r}")
    observed, tokens, codes, n_groups, unknown, nodes, w = _known_and_nodes(
        params, observed, cot_tokens, tau, tau_sd, what="items with CoT lengths", trait="speed (tau)", codes=codes,
        n_groups=n_groups, n_nodes=n_nodes, excluded=excluded)
    log_mu = params.omega[None, :] - params.phi[None, :] * nodes[:, None]
    common, rel_var = None, 0.0
    if residuals == "smearing" and observed.size >= MIN_SMEARING_ITEMS:
        m1, m2, n = smearing_moments(params, tau, observed, tokens, cot_offset)
        base = np.exp(log_mu) * unknown
        cond_mean = base * m1 - cot_offset * unknown
        cond_var = base * base * max(m2 - m1 * m1, 0.0)
        common = base * m1
        rel_var = max(m2 - m1 * m1, 0.0) * n / max(n - 1, 1) / (n * m1 * m1)
    else:
        lam2 = params.lam ** 2
        cond_mean = (np.exp(log_mu + 0.5 * lam2) - cot_offset) * unknown
        cond_var = np.expm1(lam2) * np.exp(2.0 * log_mu + lam2) * unknown
    if log_extra_sd > 0.0:  # an independent mean-1 factor on the same part: Var(XY) = (1 + a)(1 + b) - 1
        if common is None:
            common = (cond_mean + cot_offset) * unknown
        rel_var = (1.0 + rel_var) * math.exp(log_extra_sd**2) - 1.0
    return _group_totals(w, cond_mean, cond_var, observed, tokens, unknown, codes, n_groups, level, math.inf,
                         common, rel_var, intervals)


# ----------------------------------------------------------------------------- sums over the bank by trait
SUM_TOL = 1e-14  # tail of the Chebyshev coefficients accepted, relative to the panel's scale
CHEBYSHEV_DEGREES = (8, 16, 32, 64)  # nested: each degree's points include the previous one's
TOL_TIERS = (1.0, 1e3, 1e6, 1e9)  # tolerances (times SUM_TOL) of nodes of decreasing weight (SummedCurves.tiers)
SUM_CHUNK = 8192  # items per block of an exact pass over the bank


def _chebyshev_coefficients(values: np.ndarray) -> np.ndarray:
    """Chebyshev coefficients along axis 1 of values at the p + 1 points cos(pi k / p), k = 0..p."""
    from scipy.fft import dct

    p = values.shape[1] - 1
    c = dct(values, type=1, axis=1) / p
    c[:, 0] /= 2.0
    c[:, p] /= 2.0
    return c


class SummedCurves:
    """Per group (the bank, then each category), the sums over the items of a few smooth per-item
    functions of one scalar trait t: S_fg(t) = sum_{j in g} h_f(t; item j).

    A prediction needs these sums at the Gauss-Hermite nodes of the trait posterior, which move
    with every answer; computing them directly costs one pass over every item per node. Here each
    S_fg is interpolated on panels [i w, (i + 1) w] of the trait axis by its Chebyshev interpolant
    at degree 8, 16, 32 or 64: the first whose trailing coefficients fall below the tolerance times
    the panel's scale (per function: ``unit`` times the group's size, plus the largest |S_fg| on
    the panel). The tolerance is ``tol`` for a node of the largest quadrature weights and looser
    for nodes of small weight (``tol`` times TOL_TIERS, :meth:`tiers`): a node of weight 1e-20
    needs no 14 digits, and the far nodes of a wide posterior, which reach 14.5 SDs, need only
    degree 8. A panel's exact sums over every item are computed the first time a node needs
    them, at nested points (each higher degree adds the odd points), and serve every later
    prediction on the bank; which degree serves a tier depends only on the panel, so a prediction
    does not depend on the order of earlier ones. On a panel where degree 64 does not converge the
    sums are computed exactly at each node. The interpolant is exact at its points and within
    about its tolerance of the sums elsewhere. Sums over a few items (the answered ones) are exact:
    :meth:`subset_sums`.

    ``item_values(points, items)``: the values (F, P, n) of the F functions at the P points for
    the items ``items`` (a slice or indices); ``codes`` (J,) the category of each item (None: no
    categories); ``width``: the panel width; ``unit`` (F,): each function's largest value per item
    (0 where unbounded); ``item_sums(points, items)`` (optional): the sums (F, P, 1 + G) of the same
    values over the items ``items`` (indices), computed without the (F, P, n) values (the compiled
    passes of ``catengine.scoring._kernels``), used for every sum when given. No session, no I/O."""

    def __init__(self, item_values, n_items: int, codes, n_groups: int, n_functions: int, width: float,
                 unit, tol: float = SUM_TOL, chunk: int = SUM_CHUNK, item_sums=None):
        if not (math.isfinite(width) and width > 0):
            raise ValueError(f"the panel width must be a finite number > 0, got {width!r}")
        self._item_values = item_values
        self._item_sums = item_sums
        self.n_items = int(n_items)
        self.codes, self.n_groups = _groups(codes, n_groups, self.n_items)
        self.n_functions = int(n_functions)
        self.width = float(width)
        self.tol = float(tol)
        self._chunk = int(chunk)
        self.sizes = self._member(slice(None)).sum(axis=0)
        self._unit = np.asarray(unit, dtype=np.float64).reshape(self.n_functions, 1, 1)
        self._panels: dict[int, dict] = {}  # panel -> its exact sums at the highest degree so far, degree per tier

    def _member(self, items) -> np.ndarray:
        """(n, 1 + G) 0/1 membership of the items ``items``: column 0 the bank, 1 + g category g."""
        codes = self.codes[items]
        return membership(codes, self.n_groups, codes.size)

    def subset_sums(self, points, items) -> np.ndarray:
        """Exact sums (F, P, 1 + G) of the functions at ``points`` over the items ``items`` (indices)."""
        points = np.asarray(points, dtype=np.float64).reshape(-1)
        items = np.asarray(items, dtype=np.int64).reshape(-1)
        if self._item_sums is not None:
            return self._item_sums(points, items)
        out = np.zeros((self.n_functions, points.size, 1 + self.n_groups))
        for start in range(0, items.size, self._chunk):
            block = items[start:start + self._chunk]
            out += self._block_sums(points, block, self._member(block))
        return out

    def _block_sums(self, points, items, member) -> np.ndarray:
        values = np.asarray(self._item_values(points, items), dtype=np.float64)
        F, P, n = values.shape
        return (values.reshape(F * P, n) @ member).reshape(F, P, member.shape[1])

    def exact_sums(self, points) -> np.ndarray:
        """Exact sums (F, P, 1 + G) over every item of the bank at ``points`` (one pass over the items)."""
        points = np.asarray(points, dtype=np.float64).reshape(-1)
        if self._item_sums is not None:
            return self._item_sums(points, np.arange(self.n_items))
        out = np.zeros((self.n_functions, points.size, 1 + self.n_groups))
        for start in range(0, self.n_items, self._chunk):
            block = slice(start, min(start + self._chunk, self.n_items))
            out += self._block_sums(points, block, self._member(block))
        return out

    def _chebyshev_points(self, i: int, degree: int) -> np.ndarray:
        half = 0.5 * self.width
        return i * self.width + half + half * np.cos(np.pi * np.arange(degree + 1) / degree)

    def _grow(self, panels, degree: int) -> None:
        """Give each panel in ``panels`` its exact sums at ``degree`` (from none, or from degree / 2:
        the previous degree's values sit at the even points), all in one pass over the items."""
        wanted = []
        for i in panels:
            panel = self._panels.setdefault(i, {"degree": 0, "values": None, "tiers": {}})
            if panel["degree"] >= degree:
                continue
            if panel["values"] is None:
                if degree != CHEBYSHEV_DEGREES[0]:
                    raise AssertionError("a panel grows from the lowest degree")
                wanted.append((i, self._chebyshev_points(i, degree)))
            else:
                if 2 * panel["degree"] != degree:
                    raise AssertionError("a panel grows one degree at a time")
                wanted.append((i, self._chebyshev_points(i, degree)[1::2]))
        if not wanted:
            return
        sums = self.exact_sums(np.concatenate([points for _, points in wanted]))
        start = 0
        for i, points in wanted:
            got = sums[:, start:start + points.size]
            start += points.size
            panel = self._panels[i]
            if panel["values"] is None:
                values = got
            else:
                values = np.empty((self.n_functions, degree + 1, 1 + self.n_groups))
                values[:, 0::2] = panel["values"]
                values[:, 1::2] = got
            panel["degree"], panel["values"] = degree, values

    def _at_degree(self, i: int, degree: int):
        """Panel i's points and values at ``degree`` (at most its highest computed degree)."""
        panel = self._panels[i]
        return self._chebyshev_points(i, degree), panel["values"][:, ::panel["degree"] // degree]

    def _decide(self, wanted) -> None:
        """For each (panel, tier) in ``wanted``: the first degree whose trailing Chebyshev coefficients
        fall below the tier's tolerance (tol times TOL_TIERS[tier]) times the panel's scale, or None
        (values not finite, or degree 64 does not converge: exact sums instead). The degrees are tried
        in order, every undecided panel's next degree in one pass over the items, so the degree that
        serves a tier depends only on the panel, never on the order of the requests."""
        pending = sorted(set(wanted))
        for p in CHEBYSHEV_DEGREES:
            if not pending:
                return
            self._grow(sorted({i for i, _ in pending}), p)
            undecided = []
            for i, tier in pending:
                _, values = self._at_degree(i, p)
                decided = self._panels[i]["tiers"]
                if not np.all(np.isfinite(values)):
                    decided[tier] = None
                    continue
                scale = self._unit * self.sizes[None, None, :] + np.abs(values).max(axis=1, keepdims=True)
                tail = np.abs(_chebyshev_coefficients(values)[:, -(p // 4 + 1):, :])
                if np.all(tail <= self.tol * TOL_TIERS[tier] * scale):
                    decided[tier] = p
                else:
                    undecided.append((i, tier))
            pending = undecided
        for i, tier in pending:
            self._panels[i]["tiers"][tier] = None

    def _panel(self, i: int, tier: int):
        """Panel i's interpolation points and values for the tolerance tier ``tier`` (:meth:`_decide`),
        or None (exact sums)."""
        panel = self._panels.get(i)
        if panel is None or tier not in panel["tiers"]:
            self._decide([(i, tier)])
        degree = self._panels[i]["tiers"][tier]
        return None if degree is None else self._at_degree(i, degree)

    def tiers(self, weights) -> np.ndarray:
        """The tolerance tier of each point of a quadrature rule with ``weights``: a point of
        relative weight r = w / max(w) among P points is interpolated within tol max(1, 0.1 / (P r))
        (the largest of TOL_TIERS below it), so the points of small weight add at most a tenth of the
        error of the largest to any weighted sum (a mean, a variance, a mixture CDF)."""
        weights = np.asarray(weights, dtype=np.float64).reshape(-1)
        top = float(weights.max(initial=0.0))
        if not top > 0:
            return np.zeros(weights.size, dtype=np.int64)
        with np.errstate(divide="ignore"):
            allowed = np.maximum(1.0, 0.1 / (weights.size * np.maximum(weights, 0.0) / top))
        return np.searchsorted(np.asarray(TOL_TIERS), allowed, side="right") - 1

    def __call__(self, points, weights=None) -> np.ndarray:
        """The sums (F, P, 1 + G) over every item at ``points``; ``weights`` (P,): the points'
        quadrature weights, which set each point's tolerance (:meth:`tiers`; None: ``tol`` for all)."""
        points = np.asarray(points, dtype=np.float64).reshape(-1)
        # every item curve is saturated far beyond TRAIT_LIMIT (to double precision for slopes >= 1e-3):
        # clipping keeps the panel index an integer for the extreme nodes of a very wide posterior
        points = np.where(np.isfinite(points), np.clip(points, -TRAIT_LIMIT, TRAIT_LIMIT), points)
        out = np.empty((self.n_functions, points.size, 1 + self.n_groups))
        panel = np.floor(points / self.width)
        if not np.all(np.isfinite(panel)):
            raise ValueError(f"trait values must be finite, got {points[~np.isfinite(panel)][:3]}")
        tier = np.zeros(points.size, dtype=np.int64) if weights is None else self.tiers(weights)
        if tier.shape != points.shape:
            raise ValueError(f"weights must hold one value per point ({points.size})")
        exact = []
        wanted = sorted(set(zip(panel.astype(np.int64).tolist(), tier.tolist())))
        self._decide([(i, t) for i, t in wanted if i not in self._panels or t not in self._panels[i]["tiers"]])
        for i, t in wanted:
            at = np.flatnonzero((panel == i) & (tier == t))
            built = self._panel(int(i), int(t))
            if built is None:
                exact.append(at)
                continue
            out[:, at] = _barycentric(built[0], built[1], points[at])
        if exact:
            at = np.concatenate(exact)
            out[:, at] = self.exact_sums(points[at])
        return out

    def unknown_sums(self, points, known, weights=None) -> np.ndarray:
        """The sums (F, P, 1 + G) over the items not in ``known`` (distinct indices): the bank's
        sums less the known items' while those are at most half the bank, else summed directly;
        on a small bank (at most ``DIRECT_SUM_CELLS`` items times points) always directly, one
        compiled pass costing less than finding the panels. ``weights``: as for :meth:`__call__`."""
        known = np.asarray(known, dtype=np.int64).reshape(-1)
        if self._item_sums is not None and self.n_items * np.size(points) <= DIRECT_SUM_CELLS:
            rest = np.ones(self.n_items, dtype=bool)
            rest[known] = False
            return self._item_sums(np.asarray(points, dtype=np.float64).reshape(-1), np.flatnonzero(rest))
        if 2 * known.size <= self.n_items:
            total = self(points, weights)
            return total - self.subset_sums(points, known) if known.size else total
        rest = np.ones(self.n_items, dtype=bool)
        rest[known] = False
        return self.subset_sums(points, np.flatnonzero(rest))

    def group_totals(self, items, values) -> np.ndarray:
        """(1 + G,) sums of ``values`` over the items ``items``, per group (exact)."""
        items = np.asarray(items, dtype=np.int64).reshape(-1)
        values = np.asarray(values, dtype=np.float64).reshape(-1)
        return values @ self._member(items)


def _barycentric(nodes, values, points):
    """The Chebyshev interpolant through (nodes, values (F, p + 1, G)) at ``points`` (second-kind
    barycentric formula; exact at the nodes)."""
    p = nodes.size - 1
    weights = np.where(np.arange(p + 1) % 2 == 0, 1.0, -1.0)
    weights[0] *= 0.5
    weights[p] *= 0.5
    diff = points[:, None] - nodes[None, :]  # (Q, p + 1)
    hit = diff == 0.0
    safe = np.where(hit, 1.0, diff)
    kernel = weights[None, :] / safe
    out = np.einsum("qk,fkg->fqg", kernel, values) / kernel.sum(axis=1)[None, :, None]
    rows, cols = np.nonzero(hit)
    if rows.size:
        out[:, rows] = values[:, cols]
    return out


PANEL_SPAN = 2.5  # panel width times the median item's steepness in the trait
#: items times points up to which SummedCurves.unknown_sums sums the items directly (a 500-item bank
#: at 11 nodes: one compiled pass of a few microseconds, against the panels' lookup and interpolation)
DIRECT_SUM_CELLS = 20_000


def _panel_width(steepness) -> float:
    """The panels' width: PANEL_SPAN over the median item's steepness (at least 0.5). The bulk of
    the items sets the smoothness of their sum; a few steeper items only raise a panel's degree
    (or send it to the exact sums), which the convergence test catches, so the width only sets the
    cost: on banks of 50,000 items (2PL and LaRT, as ``benchmarks/engine.py serve``) this took 16-27
    exact passes per unit of the trait where the steepest item's width took 26-56."""
    steepness = np.asarray(steepness, dtype=np.float64).reshape(-1)
    return PANEL_SPAN / max(float(np.median(steepness)) if steepness.size else 0.0, 0.5)


def accuracy_curves(params: ItemParams, *, codes=None, n_groups: int = 0, a_sd=None, b_sd=None,
                    ab_cov=None) -> SummedCurves:
    """The bank's sums of pbar_j(theta) and pbar_j (1 - pbar_j) (``predict_accuracy``'s conditional
    moments) as :class:`SummedCurves` of theta."""
    J = params.n_items
    a_sd, b_sd, ab_cov = (_check_sd_array(n, v, J) for n, v in (("a_sd", a_sd), ("b_sd", b_sd), ("ab_cov", ab_cov)))
    plain = a_sd is None and b_sd is None and ab_cov is None

    def values(points, items):
        if plain:
            p, _ = response_and_slope(params, points, items)
        else:
            p = item_averaged_response(params, points, a_sd, b_sd, ab_cov, items=items)
        return np.stack([p, p * (1.0 - p)])

    steep = np.abs(params.a)
    if a_sd is not None and params.model.link == "logistic":  # Gauss-Hermite nodes shift the logistic curve
        steep = steep + float(gauss_hermite_normal(9)[0].max()) * a_sd
    width = _panel_width(steep)
    from catengine.scoring import _kernels as kernels

    group_codes, n_groups = _groups(codes, n_groups, J)
    zero = np.zeros(J)
    kind = kernels.UNCERTAINTY_NONE if plain else (
        kernels.UNCERTAINTY_B if a_sd is None and ab_cov is None else kernels.UNCERTAINTY_AB)
    arrays = (np.ascontiguousarray(params.a, dtype=np.float64), np.ascontiguousarray(params.b, dtype=np.float64),
              zero if params.c is None else np.ascontiguousarray(params.c, dtype=np.float64),
              zero + 1.0 if params.d is None else np.ascontiguousarray(params.d, dtype=np.float64),
              zero if a_sd is None else a_sd ** 2, zero if b_sd is None else b_sd ** 2,
              zero if ab_cov is None else np.ascontiguousarray(ab_cov, dtype=np.float64))
    x, w = (np.ascontiguousarray(v) for v in gauss_hermite_normal(9))  # item_averaged_response's rule
    model, n_cols = params.model.kernel_code, 1 + n_groups
    pairs = np.zeros((0, 0))
    if kind == kernels.UNCERTAINTY_B and model != kernels.MODEL_LART:  # exp(+-sd x_k) summed, once per bank
        sd = np.sqrt(np.maximum(arrays[5], 0.0))[:, None] * x[None, : x.size // 2]
        with np.errstate(over="ignore"):
            pairs = np.ascontiguousarray(np.exp(sd) + np.exp(-sd))

    def item_sums(points, items):
        return kernels.accuracy_sums(model, kind, np.ascontiguousarray(points, dtype=np.float64),
                                     np.ascontiguousarray(items, dtype=np.int64), *arrays, x, w, group_codes, n_cols,
                                     pairs)

    return SummedCurves(values, J, group_codes if n_groups else None, n_groups, 2, width, unit=(1.0, 0.25), item_sums=item_sums)


def cot_curves(params: ItemParams, *, codes=None, n_groups: int = 0) -> SummedCurves:
    """The bank's sums of exp(mu_j), exp(mu_j)^2, exp(mu_j + lam_j^2 / 2) and
    (exp(lam_j^2) - 1) exp(2 mu_j + lam_j^2), mu_j = omega_j - phi_j tau (``predict_cot_total``'s
    conditional moments), as :class:`SummedCurves` of tau (LaRT banks)."""
    if not params.model.has_cot:
        raise ValueError(f"CoT totals need a lart bank, not {params.response_model!r}")

    def values(points, items):
        idx = _item_index(items)
        log_mu = params.omega[idx][None, :] - params.phi[idx][None, :] * points[:, None]
        lam2 = params.lam[idx] ** 2
        base = np.exp(log_mu)
        return np.stack([base, base * base, np.exp(log_mu + 0.5 * lam2), np.expm1(lam2) * np.exp(2.0 * log_mu + lam2)])

    width = _panel_width(np.abs(params.phi))
    from catengine.scoring import _kernels as kernels

    group_codes, n_groups = _groups(codes, n_groups, params.n_items)
    arrays = (*(np.ascontiguousarray(v, dtype=np.float64) for v in (params.omega, params.phi)),
              *kernels.cot_item_factors(np.ascontiguousarray(params.lam, dtype=np.float64)))

    def item_sums(points, items):
        return kernels.cot_sums(np.ascontiguousarray(points, dtype=np.float64),
                                np.ascontiguousarray(items, dtype=np.int64), *arrays, group_codes, 1 + n_groups)

    return SummedCurves(values, params.n_items, group_codes if n_groups else None, n_groups, 4, width, unit=(0.0, 0.0, 0.0, 0.0),
                        item_sums=item_sums)


def _observed_from(curves, observed, values, centre, sd, *, what, trait, n_nodes, excluded=()):
    """Checked inputs: the observed items, the items off the prediction (they and the ``excluded``,
    whose sums the curves' leave out), per-group known sums and counts, the per-group counts of the
    others, and the posterior's nodes (the start of the predictions from curves)."""
    observed, values = _checked_observations(observed, values, centre, sd, what=what, trait=trait)
    if observed.size and (observed.min() < 0 or observed.max() >= curves.n_items or np.unique(observed).size != observed.size):
        raise ValueError(f"{what} must be distinct item indices in 0..{curves.n_items - 1}")
    excluded = _excluded(excluded, observed, curves.n_items)
    n_known = curves.group_totals(observed, np.ones(observed.size))
    n_unknown = curves.sizes - n_known - curves.group_totals(excluded, np.ones(excluded.size))
    off = np.concatenate([observed, excluded]) if excluded.size else observed
    x, w = gauss_hermite_normal(n_nodes)
    return observed, off, curves.group_totals(observed, values), n_known, n_unknown, float(centre) + float(sd) * x, w


def _excluded(excluded, observed, n_items) -> np.ndarray:
    """``excluded`` as distinct item indices in 0..n_items - 1, none of them among ``observed``."""
    excluded = np.asarray(excluded, dtype=np.int64).reshape(-1)
    if excluded.size and (excluded.min() < 0 or excluded.max() >= n_items or np.unique(excluded).size != excluded.size
                          or np.isin(excluded, observed).any()):
        raise ValueError(f"excluded items must be distinct item indices in 0..{n_items - 1}, none of them answered")
    return excluded


def predict_accuracy_from_curves(curves: SummedCurves, theta: float, theta_sd: float, observed, correct, *,
                                 level: float = 0.95, residual_sd: float = 0.0, n_nodes: int = DEFAULT_SCORE_NODES,
                                 intervals: bool = True, excluded=()) -> list[GroupPrediction]:
    """:func:`predict_accuracy` from the bank's :func:`accuracy_curves` (which carry the
    categories and the item uncertainty): the same predictions, each costing the answered items
    and the nodes instead of a pass over the bank per node. ``excluded``: items (bank indices,
    none answered) that the prediction leaves out: it is the accuracy over the others."""
    _non_negative("residual_sd", residual_sd)
    _, off, known_sum, n_known, n_unknown, nodes, w = _observed_from(
        curves, observed, correct, theta, theta_sd, what="observed items", trait="trait (theta)", n_nodes=n_nodes,
        excluded=excluded)
    sums = curves.unknown_sums(nodes, off, w)
    common = np.broadcast_to(float(residual_sd) * n_unknown, sums[0].shape) if residual_sd > 0 else None
    return predict_from_sums(w, sums[0], sums[1], known_sum, n_known, n_unknown, level, 1.0, common, 1.0, intervals)


def predict_cot_total_from_curves(curves: SummedCurves, params: ItemParams, tau: float, tau_sd: float, observed,
                                  cot_tokens, *, cot_offset: float, level: float = 0.95, residuals: str = "smearing",
                                  log_extra_sd: float = 0.0, n_nodes: int = DEFAULT_SCORE_NODES,
                                  intervals: bool = True, excluded=()) -> list[GroupPrediction]:
    """:func:`predict_cot_total` from the bank's :func:`cot_curves`: the same predictions
    (``excluded``: as for :func:`predict_accuracy_from_curves`)."""
    if residuals not in RESIDUAL_MOMENTS:
        raise ValueError(f"residuals must be one of {RESIDUAL_MOMENTS}, got {residuals!r}")
    _non_negative("log_extra_sd", log_extra_sd)
    observed, off, tokens_sum, n_known, n_unknown, nodes, w = _observed_from(
        curves, observed, cot_tokens, tau, tau_sd, what="items with CoT lengths", trait="speed (tau)", n_nodes=n_nodes,
        excluded=excluded)
    base, base_sq, lognormal_mean, lognormal_var = curves.unknown_sums(nodes, off, w)
    common, rel_var = None, 0.0
    if residuals == "smearing" and observed.size >= MIN_SMEARING_ITEMS:
        m1, m2, n = smearing_moments(params, tau, observed, cot_tokens, cot_offset)
        mean_sums = base * m1 - cot_offset * n_unknown
        var_sums = base_sq * max(m2 - m1 * m1, 0.0)
        common = base * m1
        rel_var = max(m2 - m1 * m1, 0.0) * n / max(n - 1, 1) / (n * m1 * m1)
    else:
        mean_sums = lognormal_mean - cot_offset * n_unknown
        var_sums = lognormal_var
    if log_extra_sd > 0.0:
        if common is None:
            common = lognormal_mean
        rel_var = (1.0 + rel_var) * math.exp(log_extra_sd**2) - 1.0
    return predict_from_sums(w, mean_sums, var_sums, tokens_sum, n_known, n_unknown, level, math.inf, common,
                             rel_var, intervals)
