"""Session glue of the full-benchmark score: reads a ``CATSession``'s history, bank and posterior and
calls the numerics of ``catengine.scoring`` (``CATSession.predicted_score`` is the entry point)."""

from __future__ import annotations

import math
from dataclasses import replace
from functools import lru_cache

import numpy as np

from catengine.estimation import ResponseState, TraitEstimate
from catengine.scoring import (
    DEFAULT_SCORE_NODES,
    DesignNotRandomisedError,
    ScoreEstimate,
    design_estimate,
    design_terms_from_sums,
    draw_sums,
    answered_hypothesis_sums,
    group_sums,
    hypothesis_variances,
    model_variance_terms,
    model_variances_from_sums,
    expected_probabilities,
    predict_accuracy_factors,
    residual_variance,
)
from catengine.scoring.model_based import HYPOTHESIS_ITEMS, hypothesis_family
from catengine.scoring.calibration import ScoreCurve
from catengine.scoring.design import draw_weights, membership
from catengine.scoring.doubly_robust import aipw_terms
from catengine.scoring.model_based import (
    accuracy_curves,
    cot_curves,
    cot_draw_sums,
    predict_accuracy_from_curves,
    predict_cot_total_from_curves,
)
from catengine.selection.base import DrawContext
from catengine.selection.randomised import RandomisedSelection

CATEGORY_ATTR = "category_field"  # a bank may name its category column in this root attribute


@lru_cache(maxsize=16)
def _string_columns(bank) -> tuple[tuple[str, int], ...]:
    """(name, number of distinct values) of the bank's per-item string variables (cached per bank)."""
    items = bank.items
    return tuple((name, int(np.unique(np.asarray(var.values).astype(str)).size)) for name, var in items.data_vars.items()
                 if var.dims == ("item",) and var.dtype.kind in "OUS")


def category_field(bank, by=None) -> str | None:
    """The item column to break the score down by.

    ``by``: a column name (must be a per-item string variable of ``bank.items``), ``False``/``""``
    for none, or ``None`` for automatic: the bank's root attribute ``category_field`` if it has one,
    else the first per-item string variable with between 2 and J/2 distinct values (a column with
    one value says nothing; one with nearly as many values as items is a label, not a category).
    """
    if by is False or by == "":
        return None
    columns = _string_columns(bank)
    string_vars = [name for name, _ in columns]
    if by is not None:
        if by not in string_vars:
            raise KeyError(f"bank {bank.bank_id!r} has no per-item string column {by!r} to break the score down by; "
                           f"it has {string_vars}")
        return str(by)
    declared = bank.attrs.get(CATEGORY_ATTR)
    if declared:
        if declared not in string_vars:
            raise KeyError(f"bank {bank.bank_id!r} declares category_field {declared!r}, which is not among its "
                           f"per-item string columns {string_vars}")
        return str(declared)
    J = bank.n_items
    for name, n_values in columns:
        if 2 <= n_values <= max(2, J // 2):
            return name
    return None


def item_uncertainty(bank, items) -> dict:
    """Item-parameter uncertainty as plain arrays {a_sd, b_sd, ab_cov} (None = absent; cached per bank).

    Uses the bank's ``item_uncertainty()`` accessor when it has one, else the optional per-item
    variables ``a_sd`` / ``b_sd`` / ``ab_cov`` (PSN 4PL banks carry ``b_sd``)."""
    return _item_uncertainty(bank, items)


@lru_cache(maxsize=16)
def _item_uncertainty(bank, items) -> dict:
    accessor = getattr(bank, "item_uncertainty", None)
    if callable(accessor):
        got = accessor()
        if got is not None:
            get = got.get if isinstance(got, dict) else (lambda k, _g=got: getattr(_g, k, None))
            return {k: None if get(k) is None else np.asarray(get(k), dtype=float) for k in ("a_sd", "b_sd", "ab_cov")}
    present = set(bank.items.data_vars)
    out = {}
    for name in ("a_sd", "b_sd", "ab_cov"):
        out[name] = np.asarray(bank.item_metadata(name), dtype=float) if name in present else None
    if out["b_sd"] is None and items.b_sd is not None:
        out["b_sd"] = np.asarray(items.b_sd)
    return out


def _categories(session, by):
    field = category_field(session.bank, by)
    if field is None:
        return None, None, None, 0
    labels, codes = session.items.groups(field)
    return field, labels, codes, labels.size


def recorded_answers(session):
    """(history, bank indices of its items, answers): the arrays kept on the session while its
    history holds the same record objects (a reply or a score check asks for them many times)."""
    h = session.history
    key = tuple(map(id, h))
    kept = session.__dict__.get("_records_cache")
    if kept is not None and kept[0] == key:
        return h, kept[1], kept[2]
    index = session.bank.index_of
    order = np.array([index(r.item) for r in h], dtype=np.int64)
    correct = np.array([r.correct for r in h], dtype=float)
    order.flags.writeable = False
    correct.flags.writeable = False
    session.__dict__["_records_cache"] = (key, order, correct, tuple(h))  # the records, so that their ids stay theirs
    return h, order, correct


def score_curve(session, theta: float | None = None, n_answered: int | None = None) -> ScoreCurve | None:
    """The bank's cross-fitted score calibration for this session's selector, or None (no stored
    check, an older bank, or an estimator that opted out: ``interval_calibration=False`` or an
    explicit ``sd_scale``, which overrides every stored calibration). ``theta`` given: for a
    session whose standing after its first ``n_answered`` answers (default all; trait estimate
    ``theta`` on banks without calibration answers) lies beyond the calibration population, the
    pointwise larger of it and the bank's strength-ordered check on that side
    (``IntervalCalibration.beyond_scores``), where stored. These curves widen the model-based
    prediction (``method="model"``) only."""
    est = session.estimator
    if not getattr(est, "interval_calibration", True) or float(getattr(est, "sd_scale", 1.0)) != 1.0:
        return None
    calib = session.items.interval_calibration
    scores = None if calib is None else calib.scores  # parsed once, with the bank
    if scores is None:
        return None
    curve = scores.curve(session.selector.name)
    if theta is None or not calib.beyond_scores:
        return curve
    standing = session_standing(session, n_answered, theta)
    edge = None if standing is None else calib.beyond_scores.get(standing.extrapolation)
    if edge is None:
        return curve
    other = edge.curve(session.selector.name)
    return curve.pointwise_max(other, f"{curve.selection}; beyond ({standing.extrapolation}): the larger of it and "
                               "the strength-ordered check's", f"{curve.measured_on} and {other.measured_on}")


def _assemble(method, level, sizes, acc, cot, field, labels, calibration: str = "") -> ScoreEstimate:
    """ScoreEstimates from per-group (mean total, sd, low, high, n_observed) tuples (group 0 = bank)."""
    def one(g):
        mean, sd, low, high, n_obs = acc[g]
        n = sizes[g]
        kwargs = {}
        if cot is not None:
            c = cot[g]
            kwargs = {"cot_total": c[0], "cot_total_sd": c[1], "cot_total_low": c[2], "cot_total_high": c[3]}
        return ScoreEstimate(accuracy=mean / n, low=low / n, high=high / n, sd=sd / n, level=level,
                             n_observed=int(n_obs), n_items=int(n), method=method, calibration=calibration, **kwargs)

    by_category = ({str(label): one(g + 1) for g, label in enumerate(labels) if acc[g + 1] is not None}
                   if labels is not None else {})  # a category with no item left (all excluded) has no score
    top = one(0)
    return ScoreEstimate(**{**{f: getattr(top, f) for f in ("accuracy", "low", "high", "sd", "level", "n_observed",
                                                            "n_items", "method", "cot_total", "cot_total_low",
                                                            "cot_total_high", "cot_total_sd", "calibration")},
                            "category_field": field, "by_category": by_category})


@lru_cache(maxsize=16)
def score_curves(bank, items, field, kind):
    """The bank's sums over its items per trait value (``catengine.scoring.model_based.SummedCurves``)
    behind the model-based prediction, per category column ``field`` (None: the bank alone) and
    ``kind`` ("accuracy": in theta; "cot": in tau, LaRT banks). Cached per bank: every session on
    the bank shares the interpolation panels built so far."""
    codes, n_groups = None, 0
    if field is not None:
        labels, codes = items.groups(field)
        n_groups = labels.size
    if kind == "cot":
        return cot_curves(items.params, codes=codes, n_groups=n_groups)
    return accuracy_curves(items.params, codes=codes, n_groups=n_groups, **item_uncertainty(bank, items))


def model_score(session, *, level=0.95, by=None, estimate: TraitEstimate | None = None, n_answered: int | None = None,
                n_nodes: int = DEFAULT_SCORE_NODES, intervals: bool = True) -> ScoreEstimate:
    """The model-based prediction (docs/math.md §7.6) from the session's reported posterior, of the
    accuracy over the items not excluded from the session (:func:`excluded_items`).

    ``estimate`` / ``n_answered``: score an earlier state (the estimate after the first
    ``n_answered`` answers; used for trajectories). ``intervals=False``: mean and SD only (the
    interval ends are NaN; the calibration-time score check needs no more)."""
    params = session.params
    h, order, correct = recorded_answers(session)
    if n_answered is not None:
        h, order, correct = h[:n_answered], order[:n_answered], correct[:n_answered]
    est = session.estimate if estimate is None else estimate
    field, labels, codes, n_groups = _categories(session, by)
    curve = score_curve(session, est.theta, n_answered)
    n = order.size
    residual_sd = 0.0 if curve is None else curve.residual(n)
    factors = session.items.score_factors
    excluded = excluded_items(session)  # left out, as in the design-based score: the accuracy over the others
    if factors is not None:  # the bank's score-factor model (docs/score_prediction.md §2)
        acc = predict_accuracy_factors(factors, order, correct, level=level, codes=codes, n_groups=n_groups,
                                       residual_sd=residual_sd, intervals=intervals, excluded=excluded)
    else:
        acc = predict_accuracy_from_curves(score_curves(session.bank, session.items, field, "accuracy"), est.theta,
                                           est.theta_sd, order, correct, level=level, n_nodes=n_nodes,
                                           residual_sd=residual_sd, intervals=intervals, excluded=excluded)
    cot = None
    if params.model.has_cot and est.tau is not None:
        cot = [(g.mean, g.sd, g.low, g.high) for g in
               model_cot_total(session, est, h, order, curve, field=field, level=level, n_nodes=n_nodes,
                               intervals=intervals)]
    sizes = [g.n_items for g in acc]
    note = "" if curve is None else curve.describe(n)
    # a category whose items are all excluded has no score
    return _assemble("model", level, sizes, [(g.mean, g.sd, g.low, g.high, g.n_observed) if g.n_items else None
                                             for g in acc], cot, field, labels, note)


def model_cot_total(session, est: TraitEstimate, history, order, curve, *, field=None, level=0.95,
                    n_nodes: int = DEFAULT_SCORE_NODES, intervals: bool = True):
    """The model-based prediction of the CoT total (GroupPredictions, LaRT banks) from the estimate
    ``est`` after the answers ``history`` (bank indices ``order``), with the score ``curve`` that
    applies (None: none): the CoT part of :func:`model_score`."""
    has = np.array([r.cot_length is not None for r in history], dtype=bool)
    tokens = np.array([r.cot_length for r in history if r.cot_length is not None], dtype=float)
    return predict_cot_total_from_curves(
        score_curves(session.bank, session.items, field, "cot"), session.params, est.tau, est.tau_sd,
        order[has] if has.size else order[:0], tokens, cot_offset=session.cot_offset, level=level, n_nodes=n_nodes,
        log_extra_sd=0.0 if curve is None else curve.cot_log(len(history)), intervals=intervals,
        excluded=excluded_items(session))


def _initial_estimate(session) -> TraitEstimate:
    """The estimate before any answer (the posterior the first draw was made from; kept on the session)."""
    cached = session.__dict__.get("_initial_estimate_cache")
    if cached is not None and cached[0] is session.estimator and cached[1] is session.params:
        return cached[2]
    est = session.estimator.estimate(session.params, ResponseState(session.params))
    session.__dict__["_initial_estimate_cache"] = (session.estimator, session.params, est)
    return est


def check_design(session) -> None:
    """Raise DesignNotRandomisedError unless the session's design draws have known positive probabilities."""
    sel = session.selector
    if not (getattr(sel, "draws_by_design", False) or callable(getattr(sel, "is_design_draw", None))):
        raise DesignNotRandomisedError(
            f"the design-based estimate needs items drawn with known probabilities; subject {session.subject!r} was "
            f"tested with {type(sel).__name__}, which does not randomise: run the session with "
            "selector=DoublyRobustSelection() or RandomisedSelection() (config types 'doubly-robust', 'randomised') "
            "or use method='model'"
        )
    if session.exposure:
        names = ", ".join(type(c).__name__ for c in session.exposure)
        raise DesignNotRandomisedError(
            f"the design-based estimate needs the randomised selector's probabilities to be the probabilities of the "
            f"administered items; exposure / content control ({names}) changes them: run without exposure controls"
        )


def design_probabilities(session, steps, before, order, predictions) -> tuple[np.ndarray, np.ndarray]:
    """(pi, remaining), each (n_draws, J): the design's probabilities of every item at each draw,
    recomputed from the posterior the draw was made from (the selector is a pure function of it,
    and of ``predictions``, the same E_q P_j(theta) it weighs by), and the items neither answered
    before it nor excluded (:func:`excluded_items`)."""
    from catengine.selection import SelectionState

    J = session.params.n_items
    remaining = np.ones((len(steps), J), dtype=bool)
    remaining[:, excluded_items(session)] = False
    pi = np.zeros((len(steps), J))
    for t, s in enumerate(steps):
        remaining[t, order[:s]] = False
        state = SelectionState(before[s], remaining[t], None, session.items)
        pi[t] = session.selector.probabilities(session.params, state, expected=predictions[t])
    return pi, remaining


def excluded_items(session) -> np.ndarray:
    """The bank indices of the items excluded from the session (never answered), sorted. The
    design-based estimate is the accuracy over the other items, the ones the session could ask:
    each draw is taken as made from them alone (docs/math.md §7.7). Items excluded before the first
    draw (the flagged items ``catengine run`` leaves out, the items a harness has no sample for)
    never were drawable, so the estimate is exactly unbiased for the accuracy over the rest; an item
    excluded after some draws is treated as if it had been excluded from the start (its answer is
    missing at random)."""
    excluded = getattr(session, "_excluded", ())  # a replayed session (``ReplayedSession``) excludes none
    return np.fromiter(sorted(excluded), dtype=np.int64, count=len(excluded))


def design_cot_variances(session, before, steps, order, tokens, pi, remaining, predictions, member, weight=1.0):
    """The model's variance of the design-based CoT total's terms, per draw and group: Var_t(D_t)
    with each unanswered item's tokens given the variance exp(2 (omega_j - phi_j tau_t)) Var(exp(e)),
    e the LLM's log-residuals at its final tau (:func:`~catengine.scoring.residual_variance`: the
    log-normal variance of their variance pooled with the bank's, or their own spread where larger).
    ``weight``: the predictions' weight lam_t (a number or one per draw; :func:`design_parts` tunes
    it). The reference form of what :func:`design_parts` computes from each draw's sums."""
    params = session.params
    factor = residual_variance(params, session.estimate.tau, order, tokens, session.cot_offset)
    taus = np.array([before[s].tau for s in steps], dtype=float)
    scale = np.exp(2.0 * (params.omega[None, :] - params.phi[None, :] * taus[:, None]))
    return model_variance_terms(predictions, pi, remaining, member=member, variances=scale * factor, weight=weight)


def design_draws(session) -> tuple[np.ndarray, list[DrawContext]]:
    """The history positions of the session's design draws that enter the design-based estimate,
    and what each was drawn from (:class:`~catengine.selection.DrawContext`). A draw made in a batch
    enters once every item drawn before it in the batch is answered: its term counts their answers
    as known (``catengine.scoring.design``). A design record without a context is a sequential
    draw, made from the estimate of the record before it."""
    h = session.history
    answered = {r.item for r in h}
    excluded = set(excluded_items(session).tolist())
    ids = session.items.item_ids
    steps, contexts = [], []
    for s, r in enumerate(h):
        if not r.design:
            continue
        ctx = r.draw
        if ctx is None:
            ctx = DrawContext(s, (), _initial_estimate(session) if s == 0 else h[s - 1])
        if all(ids[j] in answered or j in excluded for j in ctx.selected):
            steps.append(s)
            contexts.append(ctx)
    return np.asarray(steps, dtype=np.int64), contexts


def _known_at_draws(order, values, contexts, codes, n_groups) -> np.ndarray:
    """(n_draws, 1 + G): per draw, the sums of ``values`` (answers or CoT lengths, in history order)
    over the items known at it: the answers before it and the items drawn before it in its batch
    (those of them excluded since carry no answer and leave the estimate's items)."""
    position = {int(j): t for t, j in enumerate(order)}
    out = np.empty((len(contexts), 1 + n_groups))
    for t, ctx in enumerate(contexts):
        rows = list(range(ctx.answered)) + [position[j] for j in ctx.selected if j in position]
        out[t] = group_sums(values[rows], None if codes is None else codes[order[rows]], n_groups)
    return out


def _draw_sums(session, h, steps, contexts, order, correct, field, codes, n_groups):
    """Per design draw at ``steps`` (made from ``contexts``): (accuracy, cot), the
    :class:`~catengine.scoring.design.DrawSums` of the draw over the items remaining at it, per
    group of the category column ``field`` (``cot``: of the expected CoT lengths, None unless the
    bank is LaRT).

    The items remaining at a draw: those neither answered before it nor drawn before it in its batch.
    The draw's rows: the model's prediction f_t, the score-factor plug-in at the factor posterior's
    mode given the answers before the draw when the bank carries score factors (their predictions
    are the better ones, docs/score_prediction.md §2), else E_q P_j(theta) under the one-trait
    posterior the draw was made from, before the interval widening (docs/score_prediction.md §3);
    the design's probabilities pi_t, recomputed from the E_q P_j the selector weighed by (the
    reported, widened posterior it saw, what :func:`design_probabilities` recomputes); for LaRT
    banks the expected CoT lengths at that posterior's mean of tau and the variance scale
    exp(2 (omega_j - phi_j tau_t)) of :func:`design_cot_variances`. Any prediction computed from
    what was known when the item was drawn keeps the design estimate unbiased; a better one makes
    it less noisy.

    Each draw's rows depend only on what was known at it, so they are reduced to their sums once
    per draw and category column and kept on the session (valid while its history holds the same
    records: a draw's sums are reused only when its record and the last record it was drawn after
    are the very objects they were computed from, and the excluded items the same). The items
    remaining at a draw leave out the excluded ones (:func:`excluded_items`). A reply then costs the new draw's pass over the
    bank and the sums of the others, not a pass over the bank per draw."""
    from catengine.selection import SelectionState

    params = session.params
    excluded = excluded_items(session)
    left_out = excluded.tobytes()  # an exclusion changes every draw's remaining items
    cache = session.__dict__.setdefault("_design_draw_cache", {})
    factors = session.items.score_factors
    lart = params.model.has_cot
    n_nodes = session.selector.n_nodes
    J = params.n_items
    out = []
    mode = None  # the factor posterior's mode at the previous draw: the next one's warm start
    for s, ctx in zip(steps, contexts):
        s = int(s)
        a = ctx.answered
        entry = cache.get(s)
        if (entry is None or entry["record"] is not h[s] or (a > 0 and entry["previous"] is not h[a - 1])
                or entry["excluded"] != left_out):
            entry = {"record": h[s], "previous": None if a == 0 else h[a - 1], "excluded": left_out, "mode": None,
                     "sums": {}}
            if factors is not None:
                entry["mode"], _ = factors.posterior(order[:a], correct[:a], start=mode)
            cache[s] = entry
        mode = entry["mode"]
        sums = entry["sums"].get(field)
        if sums is None:
            b = ctx.estimate  # the posterior the draw was made from
            fsel = expected_probabilities(params, b.theta, b.theta_sd, n_nodes)
            if factors is not None:
                f = factors.probabilities(mode[None, :])[0]
            elif b.theta_sd / b.interval_factor == b.theta_sd:  # no widening: the selector's own E_q P_j
                f = fsel
            else:
                f = expected_probabilities(params, b.theta, b.theta_sd / b.interval_factor, n_nodes)
            remaining = np.ones(J, dtype=bool)
            remaining[order[:a]] = False
            remaining[list(ctx.selected)] = False
            remaining[excluded] = False
            pi = session.selector.probabilities(params, SelectionState(b, remaining, None, session.items),
                                                expected=fsel)
            j = int(order[s])
            tested = tests_hypotheses(params)
            acc = draw_sums(f, pi, remaining, j, codes=codes, n_groups=n_groups,
                            family=hypothesis_family(params) if tested else None)
            if tested and "rows" not in entry:  # for the answered items' outcomes in the hypotheses' sums
                drawable = remaining & (pi > 0)
                inverse = np.where(drawable, 1.0 / np.where(drawable, pi, 1.0), 0.0)
                entry["rows"] = (np.asarray(f, dtype=np.float64), inverse, remaining)
            cot = None
            if lart and b.tau is not None:  # f: expected_cot_lengths at tau; variances exp(2 (omega - phi tau))
                cot = cot_draw_sums(params, b.tau, session.cot_offset, pi, remaining, j, codes=codes, n_groups=n_groups)
            sums = entry["sums"][field] = (acc, cot)
        out.append(sums)
    return out


def _group_sizes(session, field, codes, n_groups) -> np.ndarray:
    """(1 + G,) the number of items of the bank and of each category of ``field`` that the design-based
    estimate covers: all but the excluded ones (kept on the session)."""
    excluded = excluded_items(session)
    key = (field, excluded.tobytes())
    cache = session.__dict__.setdefault("_group_size_cache", {})
    if key not in cache:
        ones = np.ones(session.params.n_items)
        ones[excluded] = 0.0
        cache[key] = group_sums(ones, codes, n_groups)
    return cache[key]


def design_score(session, *, level=0.95, by=None) -> ScoreEstimate:
    """The design-based estimate (docs/math.md §7.7, without replacement: ``catengine.scoring.design``)."""
    return _assemble("design", level, *_design_groups(session, level, by))


def known_draws(order, steps, contexts) -> np.ndarray:
    """(n_draws, n_draws) bool: [t, s] True when draw s's term was determined before draw t was
    made (``catengine.scoring.doubly_robust.known_before``): its answer and those of the items drawn
    before it in its batch were among the answers known at draw t (the first
    ``contexts[t].answered`` of the history). In a sequential session, every earlier draw."""
    from catengine.scoring.doubly_robust import known_before

    position = {int(j): k for k, j in enumerate(order)}
    done = [1 + max([int(s)] + [position[int(j)] for j in ctx.selected if int(j) in position])
            for s, ctx in zip(steps, contexts)]
    return known_before(done, [ctx.answered for ctx in contexts])


def design_parts(session, by=None) -> dict:
    """The pieces of the design-based estimate per group (column 0 the bank, 1 + g category g):
    ``terms`` (n_draws, 1 + G) the power-tuned D_t, ``lam`` (n_draws,) each draw's weight of the
    model (tuned on the draws before it, :func:`~catengine.scoring.design.predictable_power_tuning`),
    ``model_variances`` the model's Var_t(D_t); for LaRT banks with every CoT length recorded
    ``cot_terms``, ``cot_lam`` (the CoT predictions' weights) and ``cot_variances``; and the
    session's ``sizes``, ``order``, ``correct``, ``codes`` (None without categories), ``field``,
    ``labels``."""
    check_design(session)
    params = session.params
    h, order, correct = recorded_answers(session)
    steps, contexts = design_draws(session)
    is_draw = np.zeros(len(h), dtype=bool)
    is_draw[steps] = True
    prob = np.array([r.criterion if math.isfinite(r.criterion) else math.nan for r in h], dtype=float)
    if steps.size < 2:
        raise DesignNotRandomisedError(
            f"a design-based estimate needs at least 2 randomised draws; subject {session.subject!r} has {steps.size}"
        )
    field, labels, codes, n_groups = _categories(session, by)
    sizes = _group_sizes(session, field, codes, n_groups)
    # per draw: the sums of the model's prediction f_t over the items remaining at it, weighted by
    # the design's probabilities pi_t (computed once per draw)
    sums = _draw_sums(session, h, steps, contexts, order, correct, field, codes, n_groups)
    known = _known_at_draws(order, correct, contexts, codes, n_groups)
    acc = [a for a, _ in sums]
    predicted = np.array([a.predicted for a in acc])
    drawn = np.array([a.drawn for a in acc])
    if excluded_items(session).size:  # each draw as made from the items the estimate covers
        prob = prob.copy()
        prob[steps] = [a.probability for a in acc]
    # the model's predictions enter with a power-tuned weight lam_t per draw (bank-level, shared by
    # the categories), tuned on the draws known before it: near 1 for a right model, near 0 for one
    # whose predictions are worse than none, and a function of the draw's past, so that every D_t
    # keeps its conditional mean A. The D_t are linear in the predictions: D_t(lam) = D_t(0) + lam (D_t(1) - D_t(0)).
    without = design_terms_from_sums(order, correct, is_draw, prob, np.zeros_like(predicted), np.zeros_like(drawn),
                                     sizes, codes=codes, known=known)
    with_model = design_terms_from_sums(order, correct, is_draw, prob, predicted, drawn, sizes, codes=codes, known=known)
    before_draws = known_draws(order, steps, contexts)
    terms, lam = aipw_terms(without, with_model, before_draws)
    parts = {"terms": terms, "lam": lam,
             "model_variances": model_variances_from_sums(np.array([a.variance for a in acc]),
                                                          np.array([a.square for a in acc]), predicted, sizes,
                                                          weight=lam),
             "sizes": sizes, "order": order, "correct": correct, "codes": codes, "field": field, "labels": labels}
    if tests_hypotheses(params):
        parts["hypothesis_variances"] = hypothesis_variances(
            _answered_hypotheses(session, steps, acc, order, correct, codes), np.array([a.square for a in acc]),
            predicted, sizes, weight=lam)
        parts["hypothesis_accuracies"] = _hypothesis_accuracies(session, order, correct, codes, n_groups, sizes)
    if params.model.has_cot and all(h[s].cot_length is not None for s in steps):
        has = np.array([r.cot_length is not None for r in h], dtype=bool)
        before_tau = [_initial_estimate(session).tau] + [r.tau for r in h[:-1]]
        if has.all() and all(t is not None for t in before_tau):
            tokens = np.array([r.cot_length for r in h], dtype=float)
            # plug-in predictions at the posterior mean of tau: any predictable f_t keeps the estimate
            # unbiased, and averaging exp(-phi tau) over a wide early posterior (sd_scale, few items)
            # inflates the predictions by exp(phi^2 sd^2 / 2) and the estimator's variance with them
            cot = [c for _, c in sums]
            cot_predicted = np.array([c.predicted for c in cot])
            cot_drawn = np.array([c.drawn for c in cot])
            known_tokens = _known_at_draws(order, tokens, contexts, codes, n_groups)
            # the predictions' own power-tuned weight, from 1 until three draws are known: the
            # Horvitz-Thompson term of a token count (the tokens over pi) is far noisier than the
            # model's predicted lengths, which the weight then scales down where the LLM's lengths
            # do not follow them (docs/math.md §7.8)
            cot_without = design_terms_from_sums(order, tokens, is_draw, prob, np.zeros_like(cot_predicted),
                                                 np.zeros_like(cot_drawn), sizes, codes=codes, known=known_tokens)
            cot_with = design_terms_from_sums(order, tokens, is_draw, prob, cot_predicted, cot_drawn, sizes,
                                              codes=codes, known=known_tokens)
            parts["cot_terms"], parts["cot_lam"] = aipw_terms(cot_without, cot_with, before_draws, opening=1.0)
            parts["tokens"] = tokens
            # the variance of each unanswered item's tokens, exp(2 (omega - phi tau_t)) Var(exp(e)), e the
            # LLM's log-residuals at its final tau (:func:`design_cot_variances`, residual_variance)
            factor = residual_variance(params, session.estimate.tau, order, tokens, session.cot_offset)
            parts["cot_variances"] = model_variances_from_sums(
                factor * np.array([c.variance for c in cot]), np.array([c.square for c in cot]), cot_predicted, sizes,
                weight=parts["cot_lam"])
    return parts


def tests_hypotheses(params) -> bool:
    """Whether the accuracy's design interval inverts the test of each hypothesis (banks of at most
    ``HYPOTHESIS_ITEMS`` items; larger ones pool the model's variance with the draws')."""
    return params.n_items <= HYPOTHESIS_ITEMS


def _answered_hypotheses(session, steps, acc, order, correct, codes) -> np.ndarray:
    """(n_draws, 3, K, 1 + G): each draw's hypothesis sums (:attr:`DrawSums.hypotheses`) with the
    items answered since it was made at their outcomes (``catengine.scoring.design.answered_hypothesis_sums``)."""
    cache = session.__dict__["_design_draw_cache"]
    rows = [cache[int(s)]["rows"] for s in steps]
    n_groups = acc[0].predicted.size - 1
    member = membership(None if codes is None else codes[order], n_groups, order.size)
    family = hypothesis_family(session.params)
    change = answered_hypothesis_sums(family[:, order] - correct[None, :], np.array([r[1][order] for r in rows]),
                                      np.array([r[0][order] for r in rows]), np.array([r[2][order] for r in rows]),
                                      member)
    return np.array([a.hypotheses for a in acc]) - change


def _hypothesis_accuracies(session, order, correct, codes, n_groups, sizes) -> np.ndarray:
    """(K, 1 + G): per hypothesis of :func:`~catengine.scoring.model_based.hypothesis_family`, the
    accuracy of the bank and of each category the design estimate targets: the answered items'
    outcomes plus the hypothesised probabilities of the others it covers, over the group's items."""
    family = hypothesis_family(session.params)
    J = family.shape[1]
    open_items = np.ones(J, dtype=bool)
    open_items[order] = False
    open_items[excluded_items(session)] = False
    member = membership(codes, n_groups, J)
    known = group_sums(correct, None if codes is None else codes[order], n_groups)
    values = (family @ (member * open_items[:, None]) + known[None, :]) / np.maximum(sizes, 1.0)[None, :]
    return np.maximum.accumulate(values, axis=0)  # increasing in theta; guards rounding


def _design_groups(session, level, by):
    """Per group (bank, then categories): the design estimates as (sizes, acc, cot, field, labels)."""
    parts = design_parts(session, by)
    sizes, order, correct, codes = parts["sizes"], parts["order"], parts["correct"], parts["codes"]
    n_groups = sizes.size - 1
    n_obs = group_sums(np.ones(order.size), None if codes is None else codes[order], n_groups)
    known = group_sums(correct, None if codes is None else codes[order], n_groups)
    terms = parts["terms"]
    tested = tests_hypotheses(session.params)
    # each draw's weight by its index: the bank's items still unknown at it (every group the same,
    # so that the weights are fixed in advance; catengine.scoring.design.draw_weights)
    weights = draw_weights(terms.shape[0], int(sizes[0]))
    acc = []
    for g in range(sizes.size):
        if sizes[g] == 0:  # a category whose items are all excluded: nothing to estimate
            acc.append(None)
            continue
        # the interval inverts the test of each hypothesised accuracy, with the estimate's variance
        # under that hypothesis (catengine.scoring.design.design_estimate, docs/math.md §7.8); banks
        # of more than HYPOTHESIS_ITEMS items pool the model's variance with the draws'
        spread = {"hypotheses": (parts["hypothesis_accuracies"][:, g] * sizes[g],
                                 (weights**2) @ parts["hypothesis_variances"][:, :, g] * sizes[g] ** 2)} if tested \
            else {"model_variances": parts["model_variances"][:, g] * sizes[g] ** 2}
        e = design_estimate(terms[:, g] * sizes[g], level=level, n_items=int(sizes[g]),
                            bounds=(float(known[g]), float(known[g] + sizes[g] - n_obs[g])), weights=weights,
                            **spread)
        acc.append((e.mean, e.se, e.low, e.high, n_obs[g]))
    cot = None
    if "cot_terms" in parts:
        cterms, cot_var = parts["cot_terms"], parts["cot_variances"]
        known_tokens = group_sums(parts["tokens"], None if codes is None else codes[order], n_groups)
        cot = []
        for g in range(sizes.size):
            if sizes[g] == 0:
                cot.append(None)
                continue
            # the pooled rule, as the accuracy's, with the model's variance from the LLM's residual
            # variance pooled with the bank's (docs/math.md §7.8)
            e = design_estimate(cterms[:, g] * sizes[g], level=level, n_items=int(sizes[g]),
                                bounds=(float(known_tokens[g]), math.inf),
                                model_variances=cot_var[:, g] * sizes[g] ** 2, weights=weights)
            cot.append((e.mean, e.se, e.low, e.high))
    return list(sizes), acc, cot, parts["field"], parts["labels"]


def session_standing(session, n_answered: int | None = None, theta: float | None = None):
    """The session's standing among the bank's calibration LLMs (``catengine.scoring.standing``): its
    answers (the first ``n_answered``, default all) against the calibration runs' answers to the same
    items, or, on a bank that stores none, its trait estimate (``theta``, default the session's)
    among theirs. None when the bank stores no calibration traits."""
    from catengine.scoring.standing import standing

    _, order, correct = recorded_answers(session)
    if n_answered is not None:
        order, correct = order[:n_answered], correct[:n_answered]
    return standing(session.items.population, session.estimate.theta if theta is None else theta, order, correct)


def _with_standing(score: ScoreEstimate, standing, n_design: int = 0) -> ScoreEstimate:
    if standing is None:
        return replace(score, n_design=n_design)
    return replace(score, n_design=n_design, percentile=standing.percentile, extrapolation=standing.extrapolation)


def doubly_robust_score(session, *, level=0.95, by=None) -> ScoreEstimate:
    """The default score of a session with design draws (``DoublyRobustSelection``): the design-based
    estimate with the model as its control variate, for the bank, each category and the CoT total
    (docs/math.md §7.8; :func:`design_score`, labelled ``"doubly-robust"``), with the standing."""
    score = _assemble("doubly-robust", level, *_design_groups(session, level, by))
    standing, n_draws = session_standing(session), len(design_draws(session)[1])
    by_category = {label: _with_standing(c, standing, n_draws) for label, c in score.by_category.items()}
    return _with_standing(replace(score, by_category=by_category), standing, n_draws)


SCORE_METHODS = ("auto", "model", "design", "doubly-robust")


def predicted_score(session, level=0.95, method="auto", *, by=None) -> ScoreEstimate:
    """``CATSession.predicted_score``: dispatch on ``method``. "auto": for a session with design draws,
    the design-based estimate with the model as its control variate (labelled ``"design"`` for
    ``RandomisedSelection`` sessions and ``"doubly-robust"`` for ``DoublyRobustSelection`` ones, the
    default); the model's prediction when the draws do not support it (no design draws, fewer than
    2, exposure control or exclusions)."""
    if method not in SCORE_METHODS:
        raise ValueError(f"method must be one of {SCORE_METHODS}, got {method!r}")
    n_draws = len(design_draws(session)[1])
    if method == "model":
        return _with_standing(model_score(session, level=level, by=by), session_standing(session), n_draws)
    if method == "design":
        return _with_standing(design_score(session, level=level, by=by), session_standing(session), n_draws)
    if method == "doubly-robust":
        return doubly_robust_score(session, level=level, by=by)
    try:
        if getattr(session.selector, "draws_by_design", False):
            return _with_standing(design_score(session, level=level, by=by), session_standing(session), n_draws)
        return doubly_robust_score(session, level=level, by=by)
    except DesignNotRandomisedError:
        return _with_standing(model_score(session, level=level, by=by), session_standing(session), n_draws)


def score_trajectory(session, level=0.95) -> dict:
    """The model-based accuracy after each answer: arrays ``step``, ``accuracy``, ``low``, ``high``."""
    h = session.history
    steps, acc, low, high = [], [], [], []
    for t, r in enumerate(h, start=1):
        est = TraitEstimate(theta=r.theta, theta_sd=r.theta_sd, n_items=t, tau=r.tau, tau_sd=r.tau_sd)
        s = model_score(session, level=level, by=False, estimate=est, n_answered=t, n_nodes=21)
        steps.append(t)
        acc.append(s.accuracy)
        low.append(s.low)
        high.append(s.high)
    return {"step": np.array(steps), "accuracy": np.array(acc), "low": np.array(low), "high": np.array(high)}
