"""Two score estimates agree field by field to a relative tolerance: the check shared by the tests
that compare a fast scoring path with its from-scratch reference (``test_incremental_score``: the
incremental sums; ``test_design_reductions``: the reduced design sums); and the random item
parameters a 4PL or LaRT test bank adds to a and b (:func:`model_item_params`)."""

from __future__ import annotations

import math

#: the float fields of a ScoreEstimate that are compared
SCORE_FIELDS = ("accuracy", "low", "high", "sd", "cot_total", "cot_total_sd", "cot_total_low", "cot_total_high")


def close(a, b, rtol: float, scale=0.0) -> bool:
    """a and b agree to ``rtol`` relative to the larger of them and ``scale`` (an SD is compared on
    the scale of its mean: the SD of a group whose items are all answered is rounding noise); None
    agrees only with None, NaN only with NaN, an infinity only with itself."""
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, float) and (math.isnan(a) or math.isinf(a)):
        return (math.isnan(a) and math.isnan(b)) or a == b
    return abs(a - b) <= rtol * max(abs(a), abs(b), abs(scale)) + 1e-300


def assert_same_score(got, want, where, *, rtol: float, counts=("n_observed", "n_items")) -> None:
    """``got`` and ``want`` have the same method and ``counts``, every field of :data:`SCORE_FIELDS`
    within ``rtol`` (:func:`close`; an SD on the scale of its mean) and the same categories, each of
    them the same score again."""
    assert got.method == want.method, where
    assert [getattr(got, c) for c in counts] == [getattr(want, c) for c in counts], (where, counts)
    for f in SCORE_FIELDS:
        scale = {"sd": want.accuracy, "cot_total_sd": want.cot_total}.get(f, 0.0)
        assert close(getattr(got, f), getattr(want, f), rtol, scale), (where, f, getattr(got, f), getattr(want, f))
    assert got.by_category.keys() == want.by_category.keys(), where
    for label in got.by_category:
        assert_same_score(got.by_category[label], want.by_category[label], (where, label), rtol=rtol, counts=counts)


def model_item_params(model: str, rng, n: int, *, c, d, omega, phi, lam, rho, cot_offset=1.0) -> dict:
    """The ``ItemBank.from_params`` arguments a ``model`` bank of ``n`` items needs beside a and b,
    drawn from ``rng`` in this order: 4PL c ~ U(*c), d ~ U(*d); LaRT omega ~ N(*omega) (mean, SD),
    phi ~ U(*phi), lam ~ U(*lam), with the bank's ``rho`` and ``cot_offset``; none for other models."""
    if model == "4pl":
        return dict(c=rng.uniform(*c, n), d=rng.uniform(*d, n))
    if model == "lart":
        return dict(omega=rng.normal(*omega, n), phi=rng.uniform(*phi, n), lam=rng.uniform(*lam, n), rho=rho,
                    cot_offset=cot_offset)
    return {}
