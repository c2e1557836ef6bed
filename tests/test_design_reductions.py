"""The design-based and doubly robust scores from each draw's cached sums
(``catengine.scoring.design.draw_sums`` and the functions of the sums) against the reference
functions ``design_terms`` / ``model_variance_terms`` applied to the full (n_draws, J) rows: the
D_t, the power-tuned lam_t of each draw (tuned on the draws before it), the model variances, the
variances under each hypothesis of the interval (answered items at their outcomes) and the
hypotheses' accuracies, the CoT terms and variances, and the final scores,
on 2PL, LaRT (with CoT) and score-factor banks, with and without categories, with design shares
0.5 and 1; and the per-draw cache: reused only for the very records it was computed from and per
category column."""

import dataclasses
import itertools
import math

import numpy as np
import pytest

from catengine import CATSession, ItemBank
from catengine.scoring import (
    ScoreEstimate,
    design_estimate,
    design_terms,
    expected_cot_lengths,
    expected_probabilities,
    model_variance_terms,
    predictable_power_tuning,
)
from catengine.scoring.design import design_terms_from_sums, draw_sums, draw_weights, group_sums, model_variances_from_sums
from catengine.scoring.model_based import HYPOTHESIS_THETAS, response
from catengine.selection import DoublyRobustSelection, RandomisedSelection
from catengine.session import scoring as session_scoring
from catengine.session.scoring import (
    _categories,
    _initial_estimate,
    recorded_answers,
    check_design,
    design_cot_variances,
    design_parts,
    design_probabilities,
)
from catengine.stopping import MaxItems
import score_checks

J = 300
RTOL = 1e-10
WRONG_SD = 0.8
AREAS = np.array(["algebra", "geometry", "counting", "proofs", "sequences"])


def make_bank(model, seed, factors=False):
    rng = np.random.default_rng(seed)
    kw = {"a": rng.lognormal(0.2, 0.35, J), "b": rng.normal(0.0, 1.3, J), "b_sd": rng.uniform(0.05, 0.5, J)}
    if model == "lart":
        kw.update(omega=rng.normal(6.0, 0.4, J), phi=rng.uniform(0.8, 2.2, J), lam=rng.uniform(0.4, 1.2, J), rho=-0.5)
    meta = {"area": AREAS[rng.integers(0, AREAS.size, J)], "source": np.array(["bench"] * J)}
    bank = ItemBank.from_params(model, [f"q{j:03d}" for j in range(J)], bank_id=f"red_{model}_{seed}",
                                item_metadata=meta, **kw)
    if factors:
        g = np.random.default_rng(seed + 100)
        bank = bank.with_score_factors(g.normal(0.0, 1.0, (J, 2)), g.normal(0.0, 1.0, J), {"dims": 2})
    return bank


def run(bank, selector, n, seed, *, wrong=True):
    """A session of ``n`` answers; ``wrong``: answers from other item parameters than the bank's (the
    model is wrong, so the power-tuned weight lam falls below 1 and every sum matters)."""
    rng = np.random.default_rng(seed)
    p = bank.params
    theta = float(rng.normal(0.3, 1.0))
    a = p.a * (rng.uniform(0.6, 1.4, J) if wrong else 1.0)
    b = p.b + (rng.normal(0.0, WRONG_SD, J) if wrong else 0.0)
    s = CATSession(bank, selector=selector, stopping=MaxItems(n), rng=seed)
    while not s.finished:
        item = s.next_item()
        j = bank.index_of(item)
        correct = int(rng.random() < 1.0 / (1.0 + math.exp(-(a[j] * theta + b[j]))))
        cot = None
        if p.response_model == "lart":
            cot = float(np.round(math.exp(p.omega[j] - p.phi[j] * 0.3 + p.lam[j] * rng.standard_normal())))
        s.record(item, correct, cot)
    return s


# ------------------------------------------------------------------ the reference: full (n_draws, J) rows
def reference_parts(session, by=None) -> dict:
    """The design estimate's pieces from the full rows f_t, pi_t and the remaining masks, by the
    reference functions design_terms / model_variance_terms / design_cot_variances."""
    check_design(session)
    params = session.params
    h, order, correct = recorded_answers(session)
    is_draw = np.array([r.design for r in h], dtype=bool)
    prob = np.array([r.criterion for r in h], dtype=float)
    # the posterior each draw was made from: the one it records (in a sequential session, the
    # estimate after the answer before it)
    before = [r.draw.estimate if r.draw is not None else b for r, b in zip(h, [_initial_estimate(session)] + list(h[:-1]))]
    steps = np.flatnonzero(is_draw)
    n_nodes = session.selector.n_nodes
    factors = session.items.score_factors
    fsel = np.array([expected_probabilities(params, before[s].theta, before[s].theta_sd, n_nodes) for s in steps])
    if factors is None:
        f = np.array([expected_probabilities(params, before[s].theta, before[s].theta_sd / before[s].interval_factor,
                                             n_nodes) for s in steps])
    else:
        rows, mode = [], None
        for s in steps:
            mode, _ = factors.posterior(order[:s], correct[:s], start=mode)
            rows.append(factors.probabilities(mode[None, :])[0])
        f = np.array(rows)
    pi, remaining = design_probabilities(session, steps, before, order, fsel)
    field, labels, codes, n_groups = _categories(session, by)
    member = np.zeros((J, 1 + n_groups))
    member[:, 0] = 1.0
    if n_groups:
        member[np.arange(J), 1 + codes] = 1.0
    without = design_terms(order, correct, is_draw, prob, np.zeros_like(f), member=member)
    with_model = design_terms(order, correct, is_draw, prob, f, member=member)
    lam = predictable_power_tuning(without[:, 0], with_model[:, 0])  # sequential: each draw's weight from the earlier ones
    # the hypotheses behind the interval: the bank at each trait of the grid, the answered items at
    # their outcomes, one model_variance_terms call per hypothesis on the full rows
    family = response(params, HYPOTHESIS_THETAS)
    answered = np.zeros(J, dtype=bool)
    answered[order] = True
    known_rows = family.copy()
    known_rows[:, order] = correct[None, :]
    hyp_var = np.stack([model_variance_terms(f, pi, remaining, member=member, weight=lam, means=row)
                        for row in known_rows], axis=1)
    hyp_acc = (family * ~answered) @ member + (correct @ member[order])[None, :]
    out = {"terms": without + lam[:, None] * (with_model - without), "lam": lam,
           "hypothesis_variances": hyp_var, "hypothesis_accuracies": hyp_acc / member.sum(axis=0)[None, :],
           "model_variances": model_variance_terms(f, pi, remaining, member=member, weight=lam),
           "member": member, "order": order, "correct": correct, "field": field, "labels": labels,
           "f": f, "pi": pi, "remaining": remaining}
    if params.response_model == "lart" and all(r.cot_length is not None for r in h) and all(
            b.tau is not None for b in before):
        tokens = np.array([r.cot_length for r in h], dtype=float)
        g = np.array([expected_cot_lengths(params, before[s].tau, 0.0, session.cot_offset) for s in steps])
        cot_without = design_terms(order, tokens, is_draw, prob, np.zeros_like(g), member=member)
        cot_with = design_terms(order, tokens, is_draw, prob, g, member=member)
        cot_lam = predictable_power_tuning(cot_without[:, 0], cot_with[:, 0], opening=1.0)
        out["cot_terms"] = cot_without + cot_lam[:, None] * (cot_with - cot_without)
        out["cot_lam"] = cot_lam
        out["cot_variances"] = design_cot_variances(session, before, steps, order, tokens, pi, remaining, g, member,
                                                    weight=cot_lam)
        out["tokens"] = tokens
    return out


def reference_design_groups(session, level, by):
    """``_design_groups`` from :func:`reference_parts`, with the (J, 1 + G) membership matrix."""
    r = reference_parts(session, by)
    member, order, correct = r["member"], r["order"], r["correct"]
    sizes = member.sum(axis=0)
    observed = np.zeros(J)
    observed[order] = 1.0
    n_obs = observed @ member
    acc = []
    weights = draw_weights(r["terms"].shape[0], J)  # each draw's weight by its index, the bank's for every group
    for g in range(member.shape[1]):
        known = float(correct @ member[order, g])
        e = design_estimate(r["terms"][:, g] * sizes[g], level=level, n_items=int(sizes[g]),
                            bounds=(known, known + sizes[g] - n_obs[g]), weights=weights,
                            hypotheses=(r["hypothesis_accuracies"][:, g] * sizes[g],
                                        weights**2 @ r["hypothesis_variances"][:, :, g] * sizes[g] ** 2))
        acc.append((e.mean, e.se, e.low, e.high, n_obs[g]))
    cot = None
    if "cot_terms" in r:
        cot = []
        for g in range(member.shape[1]):
            e = design_estimate(r["cot_terms"][:, g] * sizes[g], level=level, n_items=int(sizes[g]),
                                bounds=(float(r["tokens"] @ member[order, g]), math.inf),
                                model_variances=r["cot_variances"][:, g] * sizes[g] ** 2, weights=weights)
            cot.append((e.mean, e.se, e.low, e.high))
    return list(sizes), acc, cot, r["field"], r["labels"]


def reference_score(session, monkeypatch, **kw):
    """predicted_score with the design part from the full rows."""
    with monkeypatch.context() as m:
        m.setattr(session_scoring, "_design_groups", reference_design_groups)
        m.setattr(session_scoring, "design_parts", None)  # nothing else may reach the sums
        return session.predicted_score(**kw)


# ------------------------------------------------------------------ comparisons
def assert_same_score(got: ScoreEstimate, want: ScoreEstimate, where):
    score_checks.assert_same_score(got, want, where, rtol=RTOL, counts=("n_observed", "n_items", "n_design"))


def assert_same_array(got, want, where, scale=None):
    got, want = np.asarray(got, dtype=float), np.asarray(want, dtype=float)
    assert got.shape == want.shape, (where, got.shape, want.shape)
    ref = np.maximum(np.abs(want), np.abs(got)) if scale is None else scale
    bad = np.abs(got - want) > RTOL * ref + 1e-300
    assert not bad.any(), (where, got[bad][:3], want[bad][:3])


def assert_same_parts(got, want, where):
    # D_t on the scale of the group's mean outcome (a category's terms can be near 0 by cancellation)
    assert_same_array(got["terms"], want["terms"], (where, "terms"), scale=np.abs(want["terms"]).max(axis=0) + 1e-300)
    assert_same_array(got["lam"], want["lam"], (where, "lam"), scale=1.0)
    assert_same_array(got["model_variances"], want["model_variances"], (where, "model variances"),
                      scale=np.abs(want["model_variances"]).max(axis=0))
    assert_same_array(got["hypothesis_variances"], want["hypothesis_variances"], (where, "hypothesis variances"),
                      scale=np.abs(want["hypothesis_variances"]).max(axis=(0, 1)))
    assert_same_array(got["hypothesis_accuracies"], want["hypothesis_accuracies"], (where, "hypothesis accuracies"),
                      scale=1.0)
    assert ("cot_terms" in got) == ("cot_terms" in want), where
    if "cot_terms" in want:
        assert_same_array(got["cot_terms"], want["cot_terms"], (where, "cot terms"),
                          scale=np.abs(want["cot_terms"]).max(axis=0))
        assert_same_array(got["cot_lam"], want["cot_lam"], (where, "cot lam"), scale=1.0)
        assert (got["cot_variances"] is None) == (want["cot_variances"] is None), where
        if want["cot_variances"] is not None:
            assert_same_array(got["cot_variances"], want["cot_variances"], (where, "cot variances"))


CASES = [  # (model, score factors, share, answers)
    ("2pl", False, 0.5, 5),
    ("2pl", False, 0.5, 37),
    ("2pl", False, 1.0, 60),
    ("2pl", True, 0.5, 24),
    ("lart", False, 0.5, 8),
    ("lart", False, 0.5, 60),
    ("lart", False, 1.0, 21),
]


@pytest.mark.parametrize("model, factors, share, n", CASES)
def test_sums_give_the_reference_terms_lam_variances_and_scores(model, factors, share, n, monkeypatch):
    bank = make_bank(model, seed=n, factors=factors)
    for seed in (1, 2):
        s = run(bank, DoublyRobustSelection(share=share), n, seed)
        for by in (None, False, "area", None):  # None again: from the cached sums of both columns
            where = (model, factors, share, n, seed, by)
            want = reference_parts(s, by)
            assert_same_parts(design_parts(s, by), want, where)
            for method in ("auto", "design", "doubly-robust"):
                assert_same_score(s.predicted_score(method=method, by=by),
                                  reference_score(s, monkeypatch, method=method, by=by), (where, method))
        assert set(s.__dict__["_design_draw_cache"][int(np.flatnonzero([r.design for r in s.history])[-1])]["sums"]) == {
            None, "area"}


def session_with_inner_lam(model, share, n, bank_seed):
    """A session whose last power-tuned weight lies strictly inside (0, 1) (a model wrong enough that
    every sum, the f^2 / pi ones too, enters the estimate): the first of a few seeds that gives one."""
    bank = make_bank(model, seed=bank_seed)
    for seed in range(1, 30):
        s = run(bank, DoublyRobustSelection(share=share), n, seed)
        if 0.0 < reference_parts(s)["lam"][-1] < 1.0:
            return s
    raise AssertionError("no session with 0 < lam < 1")


@pytest.mark.parametrize("model, share, n", [("2pl", 0.5, 30), ("lart", 1.0, 40)])
def test_sums_with_a_tuned_weight_inside_the_unit_interval(model, share, n, monkeypatch):
    s = session_with_inner_lam(model, share, n, bank_seed=n + 1)
    for by in (None, False):
        assert_same_parts(design_parts(s, by), reference_parts(s, by), (model, by))
        assert_same_score(s.predicted_score(by=by), reference_score(s, monkeypatch, by=by), (model, by))


def test_a_session_of_design_draws_only():
    bank = make_bank("lart", seed=3)
    s = run(bank, RandomisedSelection(), 30, 4)
    for by in (None, False):
        assert_same_parts(design_parts(s, by), reference_parts(s, by), by)


def test_draw_sums_against_the_reference_functions_on_random_rows():
    """Each function of the sums equals its reference on the full rows, any lam, categories or not,
    outcomes other than 0/1 (variances given)."""
    rng = np.random.default_rng(0)
    n_draws, J_ = 7, 50
    codes = rng.integers(0, 4, J_)
    member = np.zeros((J_, 5))
    member[:, 0] = 1.0
    member[np.arange(J_), 1 + codes] = 1.0
    order = rng.permutation(J_)[:12]
    outcomes = rng.uniform(0, 3, 12)
    design_step = np.zeros(12, bool)
    design_step[rng.choice(12, n_draws, replace=False)] = True
    steps = np.flatnonzero(design_step)
    f = rng.uniform(0.0, 1.0, (n_draws, J_))
    remaining = np.ones((n_draws, J_), bool)
    pi = np.zeros((n_draws, J_))
    for t, s in enumerate(steps):
        remaining[t, order[:s]] = False
        w = rng.uniform(0.1, 1.0, J_) * remaining[t]
        pi[t] = w / w.sum()
    prob = np.full(12, np.nan)
    prob[steps] = pi[np.arange(n_draws), order[steps]]
    variances = rng.uniform(0.0, 2.0, (n_draws, J_))
    for grouped, var in itertools.product((True, False), (None, variances)):
        m = member if grouped else member[:, :1]
        c = codes if grouped else None
        sums = [draw_sums(f[t], pi[t], remaining[t], order[s], codes=c, n_groups=4 if grouped else 0,
                          variances=None if var is None else var[t]) for t, s in enumerate(steps)]
        predicted = np.array([x.predicted for x in sums])
        sizes = group_sums(np.ones(J_), c, 4 if grouped else 0)
        assert_same_array(sizes, m.sum(axis=0), "sizes")
        got = design_terms_from_sums(order, outcomes, design_step, prob, predicted, [x.drawn for x in sums], sizes,
                                     codes=c)
        assert_same_array(got, design_terms(order, outcomes, design_step, prob, f, member=m), (grouped, "terms"))
        for lam in (0.0, 0.3, 1.0):
            got = model_variances_from_sums(np.array([x.variance for x in sums]), np.array([x.square for x in sums]),
                                            predicted, sizes, weight=lam)
            want = model_variance_terms(f, pi, remaining, member=m, variances=var, weight=lam)
            assert_same_array(got, want, (grouped, var is None, lam), scale=np.abs(want).max())
    with pytest.raises(ValueError, match="weight"):
        model_variances_from_sums(np.zeros((1, 1)), np.zeros((1, 1)), np.zeros((1, 1)), [1.0], weight=1.5)
    with pytest.raises(ValueError, match="one value per item"):
        draw_sums(f[0], pi[0][:-1], remaining[0], 0)


# ------------------------------------------------------------------ the cache
def test_a_changed_record_invalidates_its_draws_and_the_next(monkeypatch):
    """A record replaced in the history (another object, another answer and estimate) is not served
    from the sums of the one it replaced: the scores equal the reference from the new history (the
    record before a draw gives its answer; the posterior the draw was made from is the draw's own)."""
    bank = make_bank("2pl", seed=7)
    s = run(bank, DoublyRobustSelection(), 30, 3)
    first = s.predicted_score()
    h = s._history
    k = int(np.flatnonzero([r.design for r in h])[3])
    for i in (k - 1, k):  # the record before a draw (its posterior) and the draw's own record
        h[i] = dataclasses.replace(h[i], correct=1 - h[i].correct, theta=h[i].theta + 0.7, theta_sd=h[i].theta_sd * 1.3)
        got = s.predicted_score()
        assert_same_score(got, reference_score(s, monkeypatch), i)
        assert_same_parts(design_parts(s), reference_parts(s), i)
    assert got.accuracy != first.accuracy


def test_a_session_restored_from_a_log_recomputes_its_sums(tmp_path, monkeypatch):
    """The sums are kept per session and per record object: a session resumed from the log (the same
    answers in new records) given the original's cache, poisoned, uses none of it, and equals the
    original; a different category column gets sums of its own."""
    bank = make_bank("lart", seed=5)
    log = tmp_path / "s.jsonl"
    rng = np.random.default_rng(2)
    s = CATSession(bank, selector=DoublyRobustSelection(), stopping=MaxItems(20), rng=1, log=log, subject="llm")
    p = bank.params
    while not s.finished:
        item = s.next_item()
        j = bank.index_of(item)
        s.record(item, int(rng.random() < 0.6), float(np.round(math.exp(p.omega[j] - p.phi[j] * 0.2))))
    original = {by: s.predicted_score(by=by) for by in (None, False)}
    s.close()
    cache = s.__dict__["_design_draw_cache"]
    for entry in cache.values():
        for field, (acc, cot) in list(entry["sums"].items()):
            entry["sums"][field] = (dataclasses.replace(acc, predicted=acc.predicted + 1.0, square=acc.square * 3.0),
                                    dataclasses.replace(cot, variance=cot.variance * 2.0))
    resumed = CATSession.resume(log, bank)
    resumed.__dict__["_design_draw_cache"] = cache
    for by in (None, False):
        assert_same_score(resumed.predicted_score(by=by), original[by], ("resumed", by))
        assert_same_score(resumed.predicted_score(by=by), reference_score(resumed, monkeypatch, by=by), ("ref", by))
    assert all(entry["record"] is resumed.history[step] for step, entry in cache.items())
    assert all(set(entry["sums"]) == {"area", None} for entry in cache.values())
    resumed.close()


def test_a_wrong_sum_is_caught(monkeypatch):
    """The comparisons above have teeth: a relative error of 1e-8 in one sum fails them."""
    s = session_with_inner_lam("2pl", 1.0, 25, bank_seed=11)
    want = reference_parts(s)
    real = session_scoring.draw_sums
    for name in ("predicted", "variance", "square"):
        s.__dict__.pop("_design_draw_cache", None)

        def perturbed(*a, _name=name, **k):
            out = real(*a, **k)
            return dataclasses.replace(out, **{_name: getattr(out, _name) * (1.0 + 1e-8)})

        with monkeypatch.context() as m:
            m.setattr(session_scoring, "draw_sums", perturbed)
            with pytest.raises(AssertionError):
                assert_same_parts(design_parts(s), want, name)
    s.__dict__.pop("_design_draw_cache", None)
    assert_same_parts(design_parts(s), want, "unperturbed")


def test_a_reply_reduces_only_its_new_draw(monkeypatch):
    """Scoring again reduces nothing; after one more design draw, that draw alone (once per category
    column); the rows of a draw are never kept."""
    bank = make_bank("lart", seed=9)
    s = run(bank, DoublyRobustSelection(share=1.0), 12, 2)
    calls = []
    real = session_scoring.draw_sums
    monkeypatch.setattr(session_scoring, "draw_sums", lambda *a, **k: calls.append(a[3]) or real(*a, **k))
    s.predicted_score()
    first = len(calls)
    assert first == sum(r.design for r in s.history)  # the session's draws, each once
    s.predicted_score()
    s.predicted_score(method="design")
    assert len(calls) == first
    item = s.next_item()
    s.record(item, 1, 300.0)
    s.predicted_score()
    assert calls[first:] == [bank.index_of(item)]
    s.predicted_score(by=False)  # another category column: every draw once more
    assert len(calls) == first + 1 + sum(r.design for r in s.history)
    for entry in s.__dict__["_design_draw_cache"].values():
        for acc, cot in entry["sums"].values():
            assert acc.predicted.size <= 1 + AREAS.size and cot.variance.size <= 1 + AREAS.size
