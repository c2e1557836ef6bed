"""The design-based full-benchmark estimate (docs/math.md §7.7; active inference, Zrnic & Candes 2024).

The engine answers each item at most once, so the randomised design draws *without* replacement:
at design step t the next item is drawn from the R_t items not yet answered with a known
probability pi_t(j) > 0 (any function of the answers so far). With O_t the items answered before
step t and f_t(j) any prediction of y_j computed from the data before step t,

    D_t = (1/J) [ sum_{O_t} y_j + sum_{R_t} f_t(j) + (y_{j_t} - f_t(j_t)) / pi_t(j_t) ].

Given the past, sum_{R_t} pi_t(j) (y_j - f_t(j)) / pi_t(j) = sum_{R_t} (y_j - f_t(j)), so
E[D_t | past] = (1/J) [ sum_{O_t} y_j + sum_{R_t} y_j ] = A exactly, whatever the model gets
wrong. (With replacement, docs/math.md §7.7, O_t is empty and R_t all items; this is the same argument
on the items still unknown.) Hence the D_t - A are martingale differences and
A^ = (1/n) sum_t D_t is unbiased. Their orthogonality gives Var(A^) = (1/n^2) sum_t E Var_t(D_t),
and

    se^2 = sum_t (D_t - A^)^2 / (n (n - 1))

is unbiased for it (E sum_t (D_t - A)^2 = n^2 Var(A^), and sum_t (D_t - A^)^2 =
sum_t (D_t - A)^2 - n (A^ - A)^2); the interval A^ +- z se rests on the martingale CLT. The same
holds for any weights fixed in advance, A^ = sum_t w_t D_t (:func:`draw_weights`, which the
sessions use, and :func:`design_estimate`). Answers of
items recorded outside the design (not drawn) simply join O_t. A category G is the same with J
replaced by |G| and the correction kept only when j_t lies in G. Any per-item outcome works: the
CoT tokens of a LaRT bank with f_t the model's expected CoT length.

A draw enters D_t and the model's variance of D_t (:func:`model_variance_terms`) only through a few
sums per group over R_t (:class:`DrawSums`): sum f_t, sum Var y / pi_t, sum f_t^2 / pi_t, and the
drawn item's f_t(j_t). :func:`draw_sums` reduces a draw's rows over the bank to them once;
:func:`design_terms_from_sums` and :func:`model_variances_from_sums` then give the D_t and the
variances of any lam at a cost of the answers and the groups, not the bank. Numpy on arrays, and
one compiled pass over the bank in :func:`draw_sums` (``catengine.scoring._kernels``); no session,
no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from catengine.errors import CatEngineError


class DesignNotRandomisedError(CatEngineError, ValueError):
    """The session's items were not drawn with known positive probabilities: no design-based estimate."""


@dataclass(frozen=True)
class DesignEstimate:
    """A design-based estimate of one group's mean outcome (``mean``, projected onto the attainable
    range, its standard error ``se``, the interval ``low``-``high``) from ``n_draws`` randomised draws
    over ``n_items`` items; ``terms @ weights`` (:attr:`unprojected`) is the unbiased estimate."""

    mean: float
    se: float
    low: float
    high: float
    n_draws: int
    n_items: int
    terms: np.ndarray  # the D_t
    weights: np.ndarray | None = None  # each term's weight (summing to 1); None: equal

    @property
    def unprojected(self) -> float:
        """A^ = sum_t w_t D_t before the projection onto the attainable range."""
        d = np.asarray(self.terms, dtype=np.float64).reshape(-1)
        return float(d.mean() if self.weights is None else d @ self.weights)


def draw_weights(n_draws: int, n_items: int) -> np.ndarray:
    """The weights of the terms D_t of ``n_draws`` successive draws over ``n_items`` items (summing to
    1): w_t proportional to 1 / ((J - t) (J - t - 1)) for the t-th draw (t = 0, 1, ...), the inverse
    of its term's expected conditional variance when every earlier step drew an item uniformly:
    the correction (y - f) / pi of a uniform draw from the J - t items still unknown is (J - t)
    times an answer of a random remaining item, and the variance of the answers of a random set of
    m items has the expectation (m - 1) / m times the bank's, so E Var_t(D_t) is proportional to
    (J - t) (J - t - 1). With uniform draws and no model (f = 0) these weights make sum_t w_t D_t
    exactly the mean of the drawn answers, the estimate of simple random sampling without
    replacement, whatever the answers (docs/math.md §7.7). The last item of a bank (t = J - 1) is
    drawn with probability 1 and its term is the accuracy itself; its weight is 1 / (1 x 1) in place
    of 1 / 0 (any positive weight keeps the estimate unbiased, and the reported estimate, projected
    onto the attainable range, is then exact). They depend on the draw's index only, so the weighted mean of
    terms whose conditional means are all A is unbiased for any number of draws fixed in advance."""
    n, J = int(n_draws), int(n_items)
    if n < 0 or J < 1 or n > J:
        raise ValueError(f"need 0 <= n_draws <= n_items with n_items >= 1, got {n_draws!r} and {n_items!r}")
    unknown = J - np.arange(n, dtype=np.float64)  # the items not answered at each draw: J - t
    w = 1.0 / (unknown * np.maximum(unknown - 1.0, 1.0))
    return w / w.sum() if n else w


def design_terms(order, outcomes, design_step, probabilities, predictions, *, member=None) -> np.ndarray:
    """The D_t of every design step, per group: shape (n_draws, G).

    ``order`` (n,) item indices in the order they were answered; ``outcomes`` (n,) their outcomes;
    ``design_step`` (n,) bool, True where the item was drawn by the randomised design;
    ``probabilities`` (n,) the probability with which it was drawn (used at design steps only);
    ``predictions`` (n_draws, J) f_t for each design step, computed from the data before it;
    ``member`` (J, G) 0/1 group membership (default: one group, the whole bank).
    """
    order = np.asarray(order, dtype=np.int64).reshape(-1)
    outcomes = np.asarray(outcomes, dtype=np.float64).reshape(-1)
    design_step = np.asarray(design_step, dtype=bool).reshape(-1)
    probabilities = np.asarray(probabilities, dtype=np.float64).reshape(-1)
    predictions = np.asarray(predictions, dtype=np.float64)
    n = order.size
    if not (outcomes.size == design_step.size == probabilities.size == n):
        raise ValueError("order, outcomes, design_step and probabilities must have one entry per answered item")
    if np.unique(order).size != n:
        raise ValueError("an item appears twice in the answer order")
    n_draws = int(design_step.sum())
    if predictions.ndim != 2 or predictions.shape[0] != n_draws:
        raise ValueError(f"predictions must have one row per design step ({n_draws}), got shape {predictions.shape}")
    J = predictions.shape[1]
    if member is None:
        member = np.ones((J, 1))
    member = np.asarray(member, dtype=np.float64)
    if member.shape[0] != J:
        raise ValueError(f"member must have one row per item ({J})")
    p = probabilities[design_step]
    if np.any(~np.isfinite(p)) or np.any(p <= 0) or np.any(p > 1):
        bad = int(np.flatnonzero(~(np.isfinite(p) & (p > 0) & (p <= 1)))[0])
        raise DesignNotRandomisedError(f"design draw {bad + 1} has selection probability {p[bad]!r}; it must lie in (0, 1]")
    size = member.sum(axis=0)
    known = np.zeros(J, dtype=bool)
    known_values = np.zeros(J)
    out = np.empty((n_draws, member.shape[1]))
    t = 0
    for s in range(n):
        j = order[s]
        if design_step[s]:
            f = predictions[t]
            unknown = ~known
            base = (known_values + np.where(unknown, f, 0.0)) @ member
            out[t] = (base + member[j] * (outcomes[s] - f[j]) / probabilities[s]) / size
            t += 1
        known[j] = True
        known_values[j] = outcomes[s]
    return out


def model_variance_terms(predictions, probabilities, remaining, *, member=None, variances=None,
                         weight: float = 1.0, means=None) -> np.ndarray:
    """Per design step and group, the variance of D_t the model expects: shape (n_draws, G).

    Given the past, D_t varies only through its correction term; if y_j ~ Bernoulli(f_j),
    Var_t(D_t) = sum_{R_t in G} pi_t(j) f_j (1 - f_j) / (pi_t(j) |G|)^2 = sum_{R_t in G} f_j (1 - f_j) / (pi_t(j) |G|^2)
    (up to the squared mean correction, which is 0 under the model). ``predictions`` (n_draws, J)
    the f_t, ``probabilities`` (n_draws, J) the design's pi_t over every item, ``remaining``
    (n_draws, J) bool, the items not yet answered at step t. ``variances`` (n_draws, J): each
    outcome's variance in place of f (1 - f), for outcomes that are not 0/1 (CoT tokens).
    ``weight`` lam (a number, or one per draw, (n_draws,)): the variance of the terms built with
    predictions lam f (:func:`predictable_power_tuning`),
    sum_{R_t in G} (Var y_j + ((1 - lam) f_j)^2) / pi_t(j) - (sum_{R_t in G} (1 - lam) f_j)^2, over |G|^2.
    ``means`` (J,): the outcomes' probabilities p_j under a hypothesis other than the model's own
    (one row for every draw; :func:`hypothesis_sums`): Var y_j = p_j (1 - p_j) and E_t(y_j - lam f_j)
    = p_j - lam f_j in the same formula.
    A variance, so never below 0: the difference is clipped there, since with near-certain
    predictions its two terms agree to rounding and their difference can come out as -1e-17."""
    f = np.asarray(predictions, dtype=np.float64)
    pi = np.asarray(probabilities, dtype=np.float64)
    rem = np.asarray(remaining, dtype=bool)
    J = f.shape[1]
    member = np.ones((J, 1)) if member is None else np.asarray(member, dtype=np.float64)
    lam = _weights(weight, f.shape[0])[:, None]
    if means is not None:
        p = np.broadcast_to(np.asarray(means, dtype=np.float64).reshape(1, -1), f.shape)
        var, off = p * (1.0 - p), p - lam * f  # E_t(y_j - lam f_j) under the hypothesis
    else:
        var = f * (1.0 - f) if variances is None else np.asarray(variances, dtype=np.float64)
        off = (1.0 - lam) * f  # E_t(y_j - lam f_j) under the model
    if var.shape != f.shape:
        raise ValueError(f"variances must have the predictions' shape {f.shape}, got {var.shape}")
    ratio = np.where(rem & (pi > 0), (var + off * off) / np.where(pi > 0, pi, 1.0), 0.0)
    mean_correction = np.where(rem, off, 0.0) @ member
    return np.maximum(ratio @ member - mean_correction**2, 0.0) / member.sum(axis=0) ** 2


def group_sums(values, codes=None, n_groups: int = 0) -> np.ndarray:
    """(1 + G,) sums of ``values`` (J,): column 0 over every item, column 1 + g over the items of
    category g (``codes`` (J,) integers in 0..G-1; None: the bank alone)."""
    values = np.asarray(values, dtype=np.float64).reshape(-1)
    total = np.array([values.sum()])
    if codes is None or not n_groups:
        return total
    return np.concatenate([total, np.bincount(codes, weights=values, minlength=int(n_groups))])


def _checked_codes(codes, n_groups, J):
    if codes is None or not n_groups:
        return None, 0
    codes = np.asarray(codes, dtype=np.int64).reshape(-1)
    if codes.shape != (J,):
        raise ValueError(f"codes must hold one category per item ({J}), got shape {codes.shape}")
    return codes, int(n_groups)


@dataclass(frozen=True)
class DrawSums:
    """One design draw's sums over the items R_t not answered before it, per group (column 0 the
    bank, column 1 + g category g): all that :func:`design_terms` and :func:`model_variance_terms`
    use of the draw's J-length rows (the D_t are linear in f_t, the model variance is a quadratic
    in lam whose coefficients are these sums; :func:`draw_sums`)."""

    predicted: np.ndarray  # (1 + G,) sum_{R_t in G} f_t(j)
    variance: np.ndarray  # (1 + G,) sum_{R_t in G, pi_t(j) > 0} Var y_j / pi_t(j)
    square: np.ndarray  # (1 + G,) sum_{R_t in G, pi_t(j) > 0} f_t(j)^2 / pi_t(j)
    drawn: float  # f_t(j_t), the prediction of the drawn item
    probability: float = math.nan  # pi_t(j_t), the drawn item's probability in the rows summed
    hypotheses: np.ndarray | None = None  # (3, K, 1 + G) :func:`hypothesis_sums` (None: not computed)


def draw_sums(predictions, probabilities, remaining, item: int, *, codes=None, n_groups: int = 0,
              variances=None, family=None) -> DrawSums:
    """The :class:`DrawSums` of one design draw from its rows over the bank (one compiled pass over
    them, ``catengine.scoring._kernels``, compensated sums).

    ``predictions`` (J,) f_t; ``probabilities`` (J,) the design's pi_t; ``remaining`` (J,) bool, the
    items not answered before the draw; ``item`` j_t, the drawn item; ``codes`` / ``n_groups`` the
    categories (:func:`group_sums`); ``variances`` (J,) each outcome's variance in place of
    f (1 - f) (CoT tokens; :func:`model_variance_terms`). Items off R_t, or of probability 0, add
    exactly 0, as in :func:`model_variance_terms`. ``family`` (K, J): hypothesised answer
    probabilities (:func:`hypothesis_sums`, kept as :attr:`DrawSums.hypotheses`)."""
    from catengine.scoring import _kernels

    f = np.ascontiguousarray(predictions, dtype=np.float64).reshape(-1)
    J = f.size
    pi = np.ascontiguousarray(probabilities, dtype=np.float64).reshape(-1)
    rem = np.ascontiguousarray(remaining, dtype=bool).reshape(-1)
    if pi.shape != (J,) or rem.shape != (J,):
        raise ValueError(f"predictions, probabilities and remaining must hold one value per item ({J})")
    var = f if variances is None else np.ascontiguousarray(variances, dtype=np.float64).reshape(-1)
    if var.shape != (J,):
        raise ValueError(f"variances must hold one value per item ({J}), got shape {var.shape}")
    codes, n_groups = _checked_codes(codes, n_groups, J)
    sums = _kernels.draw_sums(f, pi, rem, var, variances is not None, _kernel_codes(codes, J), 1 + n_groups)
    hyp = None if family is None else hypothesis_sums(family, f, pi, rem, codes=codes, n_groups=n_groups)
    return DrawSums(predicted=sums[0], variance=sums[1], square=sums[2], drawn=float(f[int(item)]),
                    probability=float(pi[int(item)]), hypotheses=hyp)


def membership(codes, n_groups: int, n_rows: int) -> np.ndarray:
    """(n_rows, 1 + G) 0/1 matrix: column 0 every row, column 1 + g the rows of category g (``codes``
    (n_rows,) in 0..G-1; unused when ``n_groups`` is 0)."""
    member = np.zeros((n_rows, 1 + n_groups))
    member[:, 0] = 1.0
    if n_groups:
        member[np.arange(n_rows), 1 + np.asarray(codes, dtype=np.int64)] = 1.0
    return member


def hypothesis_sums(family, predictions, probabilities, remaining, *, codes=None, n_groups: int = 0) -> np.ndarray:
    """(3, K, 1 + G): one design draw's sums over R_t, per group, under each of K hypotheses about
    the LLM's answer probabilities, ``family`` (K, J) p_j (row k: the LLM answers item j correctly
    with probability p_kj): sum_{R_t in G, pi > 0} p_j / pi_t(j), sum_{R_t in G, pi > 0} p_j f_t(j) /
    pi_t(j) and sum_{R_t in G} p_j. With the draw's :class:`DrawSums` they give its term's variance
    under every hypothesis and any weight lam (:func:`hypothesis_variances`), since
    p (1 - p) + (p - lam f)^2 = p (1 - 2 lam f) + lam^2 f^2 is linear in p."""
    P = np.asarray(family, dtype=np.float64)
    f = np.asarray(predictions, dtype=np.float64).reshape(-1)
    J = f.size
    pi = np.asarray(probabilities, dtype=np.float64).reshape(-1)
    rem = np.asarray(remaining, dtype=bool).reshape(-1)
    if P.ndim != 2 or P.shape[1] != J or pi.shape != (J,) or rem.shape != (J,):
        raise ValueError(f"family must have shape (K, {J}) and probabilities, remaining one value per item")
    codes, n_groups = _checked_codes(codes, n_groups, J)
    drawable = rem & (pi > 0)
    inverse = np.where(drawable, 1.0 / np.where(drawable, pi, 1.0), 0.0)
    columns = _sum_columns(inverse, f, rem, membership(codes, n_groups, J))  # (J, 3, 1 + G)
    return (P @ columns.reshape(J, -1)).reshape(P.shape[0], 3, 1 + n_groups).transpose(1, 0, 2)


def _sum_columns(inverse, predictions, remaining, member) -> np.ndarray:
    """(..., m, 3, 1 + G): the weights of p_j in the three sums of :func:`hypothesis_sums` per item
    and group, 1 / pi, f / pi (0 off R_t or where pi = 0) and 1 (0 off R_t); leading axes: draws."""
    rem = np.asarray(remaining, dtype=np.float64)
    inv = np.asarray(inverse, dtype=np.float64) * rem
    x = np.stack([inv, inv * np.asarray(predictions, dtype=np.float64), rem], axis=-1)  # (..., m, 3)
    return x[..., :, None] * np.asarray(member, dtype=np.float64)[:, None, :]


def answered_hypothesis_sums(deviations, inverse, predictions, remaining, member) -> np.ndarray:
    """(n_draws, 3, K, 1 + G): what :func:`hypothesis_sums` of each draw changes by when the items
    answered since it was made carry their known outcomes in place of the hypothesised
    probabilities: the same three sums over the answered items still in R_t, of p_j - y_j.

    ``deviations`` (K, m): p_kj - y_j for the m answered items; ``inverse`` (n_draws, m): 1 / pi_t(j)
    (0 where pi_t(j) = 0); ``predictions`` (n_draws, m): f_t(j); ``remaining`` (n_draws, m) bool: j in
    R_t; ``member`` (m, 1 + G) 0/1 groups. The variance of a draw's term is a function of the
    outcomes of the items in R_t, and those answered since are known: with them in place, a
    hypothesis that the answers contradict (every item correct, after wrong answers) does not
    promise a variance of 0."""
    dev = np.asarray(deviations, dtype=np.float64)
    columns = _sum_columns(inverse, predictions, remaining, member)  # (n, m, 3, 1 + G)
    n, m, _, groups = columns.shape
    # one matrix product: (K, m) @ (m, n 3 (1 + G))
    product = dev @ columns.transpose(1, 0, 2, 3).reshape(m, n * 3 * groups)
    return product.reshape(dev.shape[0], n, 3, groups).transpose(1, 2, 0, 3)


def hypothesis_variances(hypotheses, square, predicted, sizes, *, weight) -> np.ndarray:
    """(n_draws, K, 1 + G): each draw's Var_t(D_t) under each hypothesis of :func:`hypothesis_sums`
    (``hypotheses`` stacked to (n_draws, 3, K, 1 + G); ``square``, ``predicted`` the draws'
    :class:`DrawSums` fields stacked to (n_draws, 1 + G); ``weight`` lam, one per draw):
    [sum p / pi - 2 lam sum p f / pi + lam^2 sum f^2 / pi - (sum p - lam sum f)^2] / |G|^2, the sums
    over R_t in G, clipped at 0 (:func:`model_variance_terms` with ``means`` = p)."""
    h = np.asarray(hypotheses, dtype=np.float64)
    square, predicted = (np.asarray(x, dtype=np.float64) for x in (square, predicted))
    lam = _weights(weight, h.shape[0])[:, None, None]
    sq, pr = square[:, None, :], predicted[:, None, :]
    spread = h[:, 0] - 2.0 * lam * h[:, 1] + lam * lam * sq
    mean = h[:, 2] - lam * pr
    sizes = np.maximum(np.asarray(sizes, dtype=np.float64).reshape(1, 1, -1), 1.0)
    return np.maximum(spread - mean * mean, 0.0) / sizes**2


def _kernel_codes(codes, J):
    return np.zeros(J, dtype=np.int64) if codes is None else np.ascontiguousarray(codes, dtype=np.int64)


def design_terms_from_sums(order, outcomes, design_step, probabilities, predicted, drawn, sizes, *,
                           codes=None, known=None) -> np.ndarray:
    """:func:`design_terms` from each draw's sums instead of its predictions over the bank: shape
    (n_draws, 1 + G), column 0 the bank and 1 + g category g.

    ``predicted`` (n_draws, 1 + G): sum_{R_t in G} f_t(j) (:attr:`DrawSums.predicted`; zeros for
    the Horvitz-Thompson terms, f = 0); ``drawn`` (n_draws,): f_t(j_t); ``sizes`` (1 + G,) the group
    sizes; ``codes`` (J,): the category of each item (None: the bank alone). The other arguments
    as :func:`design_terms`. ``known`` (n_draws, 1 + G): per draw, the sums of the outcomes of the
    items known at it, O_t (default: the items answered before it in ``order``; a draw made in a
    batch knows the answers before the batch and the batch's earlier items, whose outcomes arrive
    later). The cost is the answers and the groups, not the bank."""
    order = np.asarray(order, dtype=np.int64).reshape(-1)
    outcomes = np.asarray(outcomes, dtype=np.float64).reshape(-1)
    design_step = np.asarray(design_step, dtype=bool).reshape(-1)
    probabilities = np.asarray(probabilities, dtype=np.float64).reshape(-1)
    n = order.size
    if not (outcomes.size == design_step.size == probabilities.size == n):
        raise ValueError("order, outcomes, design_step and probabilities must have one entry per answered item")
    if np.unique(order).size != n:
        raise ValueError("an item appears twice in the answer order")
    sizes = np.asarray(sizes, dtype=np.float64).reshape(-1)
    n_draws = int(design_step.sum())
    predicted = np.asarray(predicted, dtype=np.float64).reshape(n_draws, -1) if n_draws else np.zeros((0, sizes.size))
    drawn = np.asarray(drawn, dtype=np.float64).reshape(-1)
    if predicted.shape != (n_draws, sizes.size) or drawn.shape != (n_draws,):
        raise ValueError(f"predicted must have shape ({n_draws}, {sizes.size}) and drawn ({n_draws},), got "
                         f"{predicted.shape} and {drawn.shape}")
    p = probabilities[design_step]
    if np.any(~np.isfinite(p)) or np.any(p <= 0) or np.any(p > 1):
        bad = int(np.flatnonzero(~(np.isfinite(p) & (p > 0) & (p <= 1)))[0])
        raise DesignNotRandomisedError(f"design draw {bad + 1} has selection probability {p[bad]!r}; it must lie in (0, 1]")
    if sizes.size > 1 and codes is None:
        raise ValueError("categories (sizes beyond the bank's) need the items' codes")
    answered_codes = None if codes is None else np.asarray(codes, dtype=np.int64)[order]
    member = membership(answered_codes, sizes.size - 1, n)  # the answered items' groups
    steps = np.flatnonzero(design_step)
    if known is None:
        known = (np.cumsum(member * outcomes[:, None], axis=0) - member * outcomes[:, None])[steps]  # answered before
    else:
        known = np.asarray(known, dtype=np.float64).reshape(n_draws, -1)
        if known.shape != (n_draws, sizes.size):
            raise ValueError(f"known must have shape ({n_draws}, {sizes.size}), got {known.shape}")
    correction = member[steps] * ((outcomes[steps] - drawn) / p)[:, None]
    # a group without items (every one excluded from the session) has every sum 0, and its terms 0
    return (known + predicted + correction) / np.maximum(sizes, 1.0)[None, :]


def model_variances_from_sums(variance, square, predicted, sizes, *, weight: float = 1.0) -> np.ndarray:
    """:func:`model_variance_terms` from each draw's sums (:class:`DrawSums`, stacked to (n_draws, 1 + G)):
    [sum Var y / pi + (1 - lam)^2 sum f^2 / pi - ((1 - lam) sum f)^2] / |G|^2, the sums over R_t in G,
    clipped at 0 as there (a variance whose terms can cancel to a rounding error below 0). ``weight``:
    a number, or one per draw."""
    variance, square, predicted = (np.asarray(x, dtype=np.float64) for x in (variance, square, predicted))
    off = 1.0 - _weights(weight, variance.shape[0] if variance.ndim else 1)
    off = off.reshape(-1, *([1] * (variance.ndim - 1))) if variance.ndim else off[0]
    sizes = np.maximum(np.asarray(sizes, dtype=np.float64).reshape(1, -1), 1.0)  # a group without items: 0
    return np.maximum(variance + off * off * square - (off * predicted) ** 2, 0.0) / sizes**2


def _weights(weight, n: int) -> np.ndarray:
    """lam as one value per draw (n,), each in [0, 1] (ValueError otherwise)."""
    w = np.asarray(weight, dtype=np.float64)
    if w.ndim == 0:
        w = np.full(n, float(w))
    w = w.reshape(-1)
    if w.size != n or not np.all((w >= 0.0) & (w <= 1.0)):
        raise ValueError(f"weight must lie in [0, 1], one value or one per draw ({n}), got {weight!r}")
    return w


def power_tuning(terms_without, terms_with) -> float:
    """The weight lam in [0, 1] of the model's predictions that minimises the variance of the
    design terms, D_t(lam) = D_t(0) + lam (D_t(1) - D_t(0)), estimated from the draws themselves
    (power tuning, as in PPI++, Angelopoulos et al. 2023): lam = -Cov(D(0), D(1) - D(0)) / Var(D(1) - D(0)).

    ``terms_without``: the D_t computed with f_t = 0 (Horvitz-Thompson: no model at all);
    ``terms_with``: the D_t with the model's f_t. The D_t are linear in f_t, so any lam gives
    terms of the same form with predictions lam f_t, and every fixed lam keeps the estimate
    unbiased; choosing lam from the same draws adds a bias of order 1/n. A right model gets lam near
    1 (its predictions absorb the spread of the outcomes); a model whose predictions are worse
    than none gets lam near 0, so a wrong model cannot make the design estimate noisier than the
    Horvitz-Thompson estimate of the same draws. With fewer than 3 draws, or no spread in the
    difference, lam = 1."""
    a = np.asarray(terms_without, dtype=np.float64).reshape(-1)
    b = np.asarray(terms_with, dtype=np.float64).reshape(-1) - a
    if a.size != b.size:
        raise ValueError("terms_without and terms_with must hold one value per draw each")
    if a.size < 3:
        return 1.0
    vb = float(np.var(b))
    if not vb > 1e-14 * max(1.0, float(np.var(a))):
        return 1.0
    lam = -float(np.mean((a - a.mean()) * (b - b.mean()))) / vb
    return float(min(1.0, max(0.0, lam)))


def predictable_power_tuning(terms_without, terms_with, known=None, opening: float = 0.0) -> np.ndarray:
    """One weight lam_t per draw, each tuned by :func:`power_tuning` on the draws whose terms were
    determined before draw t was made: lam_t is then a function of the past of draw t, like f_t and
    pi_t, and D_t(lam_t) = D_t(0) + lam_t (D_t(1) - D_t(0)) keeps E[D_t(lam_t) | past] = A exactly
    (docs/math.md §7.8), where one lam tuned on all the draws, their own included, would add a bias
    of order 1/n. Until three such draws are known lam_t = ``opening``: by default 0, the
    Horvitz-Thompson term, so that the model enters only once draws show that it helps (the first
    draws' predictions come from a posterior that knows almost nothing about the LLM); 1 for an
    outcome whose Horvitz-Thompson terms are far noisier than any prediction (token counts).

    ``known`` (n, n) bool: known[t, s] True when draw s's term was determined before draw t was
    made (default: s < t, a sequential session; in a batch, draws whose answers were not yet in
    are not known to the batch's later draws)."""
    a = np.asarray(terms_without, dtype=np.float64).reshape(-1)
    b = np.asarray(terms_with, dtype=np.float64).reshape(-1)
    n = a.size
    if b.size != n:
        raise ValueError("terms_without and terms_with must hold one value per draw each")
    if known is None:
        known = np.tri(n, n, -1, dtype=bool)
    known = np.asarray(known, dtype=bool)
    if known.shape != (n, n):
        raise ValueError(f"known must have shape ({n}, {n}), got {known.shape}")
    if not 0.0 <= opening <= 1.0:
        raise ValueError(f"opening must lie in [0, 1], got {opening!r}")
    if n == 0:
        return np.zeros(0)
    # :func:`power_tuning` of every row's draws at once, from the moments of the known draws (shifted
    # by the first draw's values, which leaves covariances unchanged, keeps the sums small and lets no
    # later draw enter an earlier weight even by rounding)
    x, d = a - a[0], (b - a) - (b[0] - a[0])
    k = known.astype(np.float64)
    count = k.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        mx, md = (k @ x) / count, (k @ d) / count
        var_x = (k @ (x * x)) / count - mx * mx
        var_d = (k @ (d * d)) / count - md * md
        cov = (k @ (x * d)) / count - mx * md
        tuned = np.clip(-cov / var_d, 0.0, 1.0)
    spread = var_d > 1e-14 * np.maximum(1.0, var_x)
    return np.where(count >= 3, np.where(spread, tuned, 1.0), float(opening))


MODEL_VARIANCE_RULES = ("moderated", "floor")


#: the draws the model's variance estimate counts as in the pooled variance of the "moderated" rule
MODEL_DRAWS = 10

#: the draws the model's dispersion (1) counts as beside the draws' own in the test-inverted interval
DISPERSION_DRAWS = 20


def design_estimate(terms: np.ndarray, *, level: float = 0.95, n_items: int, bounds=(-math.inf, math.inf),
                    model_variances=None, model_rule: str = "moderated", model_draws: int | None = MODEL_DRAWS,
                    weights=None, hypotheses=None, dispersion_draws: int = DISPERSION_DRAWS) -> DesignEstimate:
    """A^ = sum_t w_t D_t, se^2 = sum_t w_t^2 (D_t - A^)^2 / (1 - sum_t w_t^2), interval A^ +- q se.

    ``weights`` (n,) w_t, fixed in advance and summing to 1 (:func:`draw_weights`; default equal:
    A^ the mean of the D_t and se^2 = sum (D_t - A^)^2 / (n (n - 1))). Var(A^) = sum_t w_t^2 E
    Var_t(D_t), since the D_t - A are martingale differences, and se^2 is unbiased for it when the
    Var_t(D_t) are proportional to 1 / w_t (the design of :func:`draw_weights`; exactly with equal
    weights and any variances). The degrees of freedom below count n_e = 1 / sum_t w_t^2 draws.

    ``bounds``: the attainable range (the answered items' outcomes plus none / all of the rest).
    The interval's ends and the reported mean are projected onto it. Since the truth lies in the
    range, the projected mean is never farther from it than A^ itself, in every session; A^ is
    unbiased and the projection moves it only when it leaves the range (a draw of small probability
    that surprised the model, or a category of few items: one such draw gave a 55-item category
    an estimate of 288% after 2 draws). ``terms`` keeps the D_t.

    ``model_variances`` (n,): the model's Var_t(D_t) (:func:`model_variance_terms`), whose weighted
    sum V = sum_t w_t^2 Var_t (sum_t Var_t / n^2 with equal weights) is a second estimate of Var(A^),
    exact if the model were right.
    With few draws the empirical se^2 is itself noisy and, when small by chance, gives intervals that
    miss (MATH500, 10 draws: se^2 alone held the truth 0.84 of the time); V is a fixed figure where
    the model is right and off where it is wrong (for LLMs stronger than every calibration LLM,
    with a 2PL bank fitted to data with guessing floors, V was twice the Monte-Carlo variance). The
    rules change only the variance: A^ is the same under every rule.

    * ``model_rule="moderated"`` (the default): the variance is max(se^2, (m V + (n_e - 1) se^2) /
      (m + n_e - 1)) with m = ``model_draws`` (default ``MODEL_DRAWS`` = 10; None: m = n_e), the
      model's estimate counted as m draws' worth of evidence beside the n_e - 1 degrees of freedom
      of the empirical one (the posterior of a normal variance under a scaled inverse chi-square
      prior of m degrees of freedom centred on V), never below the empirical se^2 (the consistent
      figure whatever the model gets wrong), and q is the Student-t quantile with m + n_e - 1
      degrees of freedom. A short test borrows the model's stability; a long one rests on its own
      draws;
    * ``model_rule="floor"``: max(se^2, V), with the normal quantile where V binds and the t
      quantile with n_e - 1 degrees of freedom where it does not.

    ``hypotheses`` (the default of the sessions' accuracy; in place of ``model_variances``): a pair
    of arrays (K,), the values the estimate targets under K hypotheses about the subject and Var(A^)
    under each (:func:`hypothesis_variances` summed with the weights w_t^2), in the units of the
    terms, increasing in the first. The interval is the set of values a the estimate does not
    reject, (A^ - a)^2 <= q^2 c V(a), V(a) interpolated between the hypotheses (constant beyond
    them), as the Wilson interval of a proportion inverts the test whose variance is the one at the
    hypothesised value: the variance of a session whose draws all agree (the answers of a strong LLM)
    is the one at the values it must reject, not the small one at its own estimate. c = max(1,
    (d + (n_e - 1) r) / (d + n_e - 1)) is the dispersion the draws show, r = se^2 / V(A^), pooled
    with the model's (1) counted as d = ``dispersion_draws`` draws, and never below the model's:
    where the item-level spread is not the hypotheses' the draws widen the interval (where V(A^) = 0,
    every remaining answer certain under the hypothesis at the estimate, the draws' se^2 pooled the
    same way adds to V(a) instead). q is the normal
    quantile, as in the Wilson interval: the variance is the hypothesis's own, not one estimated from
    the draws, which can only widen it. The reported ``se`` is sqrt(c V(A^)).

    Without ``model_variances`` or ``hypotheses``: se^2 and the t quantile with n_e - 1 degrees of
    freedom (the usual small-sample refinement of the normal quantile the martingale CLT gives)."""
    d = np.asarray(terms, dtype=np.float64).reshape(-1)
    n = d.size
    if n < 2:
        raise DesignNotRandomisedError(f"a design-based estimate needs at least 2 randomised draws, this session has {n}")
    if model_rule not in MODEL_VARIANCE_RULES:
        raise ValueError(f"model_rule must be one of {MODEL_VARIANCE_RULES}, got {model_rule!r}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must lie in (0, 1), got {level!r}")
    w, mean, se2, n_e = _weighted_moments(d, weights)
    from scipy.special import ndtri, stdtrit  # the normal and Student-t quantiles (scipy.stats loads slowly)

    df = n_e - 1
    normal = False
    lo, hi = float(bounds[0]), float(bounds[1])
    if hypotheses is not None:
        if model_variances is not None:
            raise ValueError("give model_variances or hypotheses, not both")
        return _inverted_estimate(d, w, mean, se2, n_e, hypotheses, dispersion_draws, level, lo, hi, int(n_items))
    if model_variances is not None:
        v = np.asarray(model_variances, dtype=np.float64).reshape(-1)
        if v.shape != (n,) or not np.all(np.isfinite(v)) or np.any(v < 0):
            raise ValueError(f"model_variances must hold {n} finite values >= 0, one per draw")
        model = float(v.sum()) / n**2 if w is None else float(np.sum(w * w * v))
        if model_rule == "moderated":
            m = n_e if model_draws is None else float(model_draws)
            se2 = max(se2, (m * model + (n_e - 1) * se2) / (m + n_e - 1))
            df = m + n_e - 1
        else:
            normal = model > se2
            se2 = max(se2, model)
    se = math.sqrt(se2)
    z = float(ndtri(0.5 + level / 2.0) if normal else stdtrit(df, 0.5 + level / 2.0))

    def project(x):
        return min(max(x, lo), hi)

    return DesignEstimate(project(mean), se, project(mean - z * se), project(mean + z * se), n, int(n_items), d, w)


def _weighted_moments(d, weights):
    """(w, A^, se^2, n_e) of the terms ``d`` under ``weights`` (None: equal)."""
    n = d.size
    if weights is None:
        mean = float(d.mean())
        return None, mean, float(np.sum((d - mean) ** 2)) / (n * (n - 1)), float(n)
    w = np.asarray(weights, dtype=np.float64).reshape(-1)
    if w.shape != (n,) or not np.all(np.isfinite(w)) or np.any(w <= 0) or abs(float(w.sum()) - 1.0) > 1e-9:
        raise ValueError(f"weights must hold {n} positive values summing to 1, one per draw")
    mean = float(d @ w)
    s2 = float(np.sum(w * w))
    return w, mean, float(np.sum(w * w * (d - mean) ** 2)) / (1.0 - s2), 1.0 / s2


def _inverted_estimate(d, w, mean, se2, n_e, hypotheses, dispersion_draws, level, lo, hi, n_items) -> DesignEstimate:
    """:func:`design_estimate` with ``hypotheses``: the test-inverted interval."""
    from scipy.special import ndtri

    values, variances = (np.asarray(x, dtype=np.float64).reshape(-1) for x in hypotheses)
    if values.size < 2 or values.shape != variances.shape or not np.all(np.isfinite(values)) \
            or not np.all(np.isfinite(variances)) or np.any(variances < 0) or np.any(np.diff(values) < 0):
        raise ValueError("hypotheses must be two arrays of one finite value per hypothesis, the first increasing "
                         "and the variances >= 0")
    if dispersion_draws < 0:
        raise ValueError(f"dispersion_draws must be >= 0, got {dispersion_draws!r}")
    at_estimate = float(np.interp(mean, values, variances))
    m = float(dispersion_draws)
    if at_estimate > 0:
        scale, extra = max(1.0, (m + (n_e - 1.0) * se2 / at_estimate) / (m + n_e - 1.0)), 0.0
    else:  # the hypotheses give the estimate no variance (every answer certain): the draws' own, pooled, adds
        scale, extra = 1.0, (n_e - 1.0) * se2 / (m + n_e - 1.0)
    z2 = float(ndtri(0.5 + level / 2.0)) ** 2
    point = min(max(mean, lo), hi)

    def excess(a):  # >= 0 where the value a is not rejected
        return z2 * (scale * np.interp(a, values, variances) + extra) - (mean - a) ** 2

    low = _acceptance_end(excess, point, lo, values, -1)
    high = _acceptance_end(excess, point, hi, values, +1)
    return DesignEstimate(point, math.sqrt(scale * at_estimate + extra), low, high, d.size, n_items, d, w)


def _acceptance_end(excess, point, bound, values, direction) -> float:
    """The far end, from ``point`` towards ``bound``, of the values a with excess(a) >= 0 (the hull
    of the set the test does not reject): scanned over the hypotheses' values and a fine grid
    between, then the last crossing bisected. ``point`` itself when even it is rejected (an estimate
    outside the attainable range whose nearest attainable value the test rejects)."""
    if not math.isfinite(bound):
        bound = float(values[-1] if direction > 0 else values[0])
        bound = max(bound, point) if direction > 0 else min(bound, point)
    if bound == point:
        return point
    inner = values[(values - point) * direction > 0]
    inner = inner[(bound - inner) * direction > 0]
    grid = np.unique(np.concatenate([[point, bound], inner, np.linspace(point, bound, 257)]))
    if direction < 0:
        grid = grid[::-1]
    ok = excess(grid) >= 0
    if not ok[0]:
        return point
    last = int(np.flatnonzero(ok)[-1])
    if last == grid.size - 1:
        return float(bound)
    a, b = float(grid[last]), float(grid[last + 1])  # accepted, rejected
    for _ in range(60):
        mid = 0.5 * (a + b)
        if excess(mid) >= 0:
            a = mid
        else:
            b = mid
    return a
