"""Scale linking: direction conventions, exact and noisy recovery, errors.

Convention under test: a linking result maps the NEW scale onto the REFERENCE scale,
theta_ref = A * theta_new + B. If the truth is theta_new = 1.3 * theta_ref + 0.4, linking must
return A = 1 / 1.3, B = -0.4 / 1.3, and ``result.inverse()`` A = 1.3, B = 0.4.
"""

import math

import numpy as np
import pytest

from calibration.linking import (
    LinkingResult,
    _prob_and_slope,
    _sl_objective,
    apply_to_params,
    apply_to_theta,
    link,
    mean_sigma,
    mean_sigma_difficulties,
    stocking_lord,
)
from catengine.models import prob_correct
from catengine.models.params import ItemParams

TRUE_A, TRUE_B = 1.3, 0.4  # theta_new = 1.3 * theta_ref + 0.4
MODELS = ("2pl", "4pl", "lart")


def reference_params(model: str, n: int = 40, seed: int = 11) -> ItemParams:
    rng = np.random.default_rng(seed)
    a = np.exp(rng.normal(0.0, 0.3, n))
    b = rng.normal(0.0, 1.0, n)
    extra = {}
    if model == "4pl":
        extra = {"c": rng.uniform(0.0, 0.2, n), "d": rng.uniform(0.85, 1.0, n)}
    if model == "lart":
        extra = {"omega": rng.normal(5.0, 1.0, n), "phi": rng.uniform(0.5, 1.5, n), "lam": rng.uniform(0.3, 0.8, n)}
    return ItemParams(model, a=a, b=b, rho=0.3 if model == "lart" else 0.0, **extra)


def with_noise(params: ItemParams, seed: int, sd_log_a: float = 0.05, sd_b: float = 0.05) -> ItemParams:
    rng = np.random.default_rng(seed)
    kwargs = {name: getattr(params, name) for name in params.parameter_names}
    kwargs["a"] = params.a * np.exp(rng.normal(0.0, sd_log_a, params.n_items))
    kwargs["b"] = params.b + rng.normal(0.0, sd_b, params.n_items)
    return ItemParams(params.response_model, rho=params.rho, **kwargs)


def test_apply_to_params_keeps_the_linear_predictor():
    ref = reference_params("4pl")
    new = apply_to_params(ref, TRUE_A, TRUE_B)
    theta = np.linspace(-3, 3, 13)
    for t in theta:
        # the same subject, measured on both scales, has the same P(correct) on every item
        np.testing.assert_allclose(prob_correct(new, TRUE_A * t + TRUE_B), prob_correct(ref, t), rtol=0, atol=1e-13)
    np.testing.assert_array_equal(new.c, ref.c)
    np.testing.assert_array_equal(new.d, ref.d)
    np.testing.assert_allclose(new.a, ref.a / TRUE_A)
    np.testing.assert_allclose(new.b, ref.b - ref.a * TRUE_B / TRUE_A)


def test_apply_to_params_lart_leaves_cot_parameters():
    ref = reference_params("lart")
    new = apply_to_params(ref, TRUE_A, TRUE_B)
    for name in ("omega", "phi", "lam"):
        np.testing.assert_array_equal(getattr(new, name), getattr(ref, name))
    assert new.rho == ref.rho


def test_apply_to_theta_and_round_trip():
    assert apply_to_theta(1.0, 2.0, -1.0) == 1.0
    np.testing.assert_allclose(apply_to_theta([0.0, 1.0], 2.0, 0.5), [0.5, 2.5])
    ref = reference_params("2pl")
    there = apply_to_params(ref, TRUE_A, TRUE_B)
    back = apply_to_params(there, 1 / TRUE_A, -TRUE_B / TRUE_A)
    np.testing.assert_allclose(back.a, ref.a, rtol=1e-14)
    np.testing.assert_allclose(back.b, ref.b, atol=1e-14)


@pytest.mark.parametrize("A", [0.0, -1.0, math.nan, math.inf])
def test_apply_rejects_bad_slope(A):
    with pytest.raises(ValueError, match="A must be finite and > 0"):
        apply_to_params(reference_params("2pl"), A, 0.0)
    with pytest.raises(ValueError, match="A must be finite and > 0"):
        apply_to_theta(0.0, A, 0.0)


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("method", ["mean-sigma", "stocking-lord"])
def test_perfect_transform_recovered_exactly(model, method):
    ref = reference_params(model)
    new = apply_to_params(ref, TRUE_A, TRUE_B)
    result = link(ref, new, method=method)
    assert isinstance(result, LinkingResult) and result.method == method
    assert result.n_common == 40 and result.converged
    # direction: new -> reference
    assert result.A == pytest.approx(1 / TRUE_A, abs=1e-6)
    assert result.B == pytest.approx(-TRUE_B / TRUE_A, abs=1e-6)
    inv = result.inverse()
    assert inv.A == pytest.approx(TRUE_A, abs=1e-6)
    assert inv.B == pytest.approx(TRUE_B, abs=1e-6)
    assert result.criterion < 1e-12
    # the linked new items are the reference items again
    linked = result.transform_params(new)
    np.testing.assert_allclose(linked.a, ref.a, atol=1e-6)
    np.testing.assert_allclose(linked.b, ref.b, atol=1e-6)
    theta_ref = np.array([-1.0, 0.0, 2.0])
    np.testing.assert_allclose(result.transform_theta(TRUE_A * theta_ref + TRUE_B), theta_ref, atol=1e-6)


@pytest.mark.parametrize("model", MODELS)
def test_stocking_lord_optimises_from_a_poor_start(model):
    # start far from the answer so the optimiser (not the mean-sigma start) does the work
    ref = reference_params(model)
    new = apply_to_params(ref, TRUE_A, TRUE_B)
    result = stocking_lord(ref, new, start=(1.0, 0.0))
    assert result.n_iter > 0
    assert result.A == pytest.approx(1 / TRUE_A, abs=1e-6)
    assert result.B == pytest.approx(-TRUE_B / TRUE_A, abs=1e-6)


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("method", ["mean-sigma", "stocking-lord"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_noisy_transform_recovered(model, method, seed):
    ref = reference_params(model, n=40, seed=seed)
    new = with_noise(apply_to_params(ref, TRUE_A, TRUE_B), seed=100 + seed)
    result = link(ref, new, method=method).inverse()
    # 5% noise on a and SD 0.05 on b over 40 items: over 59 seeds the largest error in A or B
    # was 0.071 for mean-sigma (difficulty ratios amplify noise) and 0.040 for Stocking-Lord
    # (95th percentiles 0.053 / 0.026); the tolerances leave room and still reject the identity.
    tol = 0.09 if method == "mean-sigma" else 0.05
    assert result.A == pytest.approx(TRUE_A, abs=tol)
    assert result.B == pytest.approx(TRUE_B, abs=tol)


@pytest.mark.parametrize("model", MODELS)
def test_stocking_lord_gradient_matches_finite_differences(model):
    ref = reference_params(model)
    new = with_noise(apply_to_params(ref, TRUE_A, TRUE_B), seed=5)
    theta = np.linspace(-4, 4, 31)
    w = np.exp(-0.5 * theta**2)
    w /= w.sum()
    tcc_ref = _prob_and_slope(ref, theta[:, None] * ref.a + ref.b)[0].sum(axis=1)
    x = np.array([math.log(0.9), -0.2])
    _, g = _sl_objective(x, theta, w, tcc_ref, new)
    h = 1e-6
    num = [
        (_sl_objective(x + h * e, theta, w, tcc_ref, new)[0] - _sl_objective(x - h * e, theta, w, tcc_ref, new)[0]) / (2 * h)
        for e in np.eye(2)
    ]
    # central differences with h = 1e-6 are accurate to ~1e-9 here
    np.testing.assert_allclose(g, num, rtol=1e-5, atol=1e-9)


def test_mean_sigma_skips_nonpositive_slopes_and_counts_them():
    ref = reference_params("2pl")
    a = ref.a.copy()
    a[[0, 5]] = [0.0, -0.4]
    ref = ItemParams("2pl", a=a, b=ref.b)
    new = apply_to_params(ref, TRUE_A, TRUE_B)
    result = mean_sigma(ref, new)
    assert result.n_excluded == 2 and result.n_common == 38
    assert result.inverse().A == pytest.approx(TRUE_A, abs=1e-9)
    assert result.inverse().B == pytest.approx(TRUE_B, abs=1e-9)
    # Stocking-Lord keeps them (they are legal items; their curves transform the same way)
    sl = stocking_lord(ref, new)
    assert sl.n_common == 40 and sl.inverse().A == pytest.approx(TRUE_A, abs=1e-6)


def test_mean_sigma_difficulties_low_level():
    d_ref = np.array([-1.0, 0.0, 0.5, 2.0])
    A, B = mean_sigma_difficulties(d_ref, (d_ref - 0.4) / 1.3)
    assert A == pytest.approx(1.3) and B == pytest.approx(0.4)
    with pytest.raises(ValueError, match="do not vary"):
        mean_sigma_difficulties([1.0, 1.0], [0.0, 0.0])


def test_common_items_by_id_in_any_order():
    ref = reference_params("2pl", n=30)
    ids_ref = [f"q{k}" for k in range(30)]
    new_full = apply_to_params(ref, TRUE_A, TRUE_B)
    # the new calibration has items 10..29 (shuffled) plus 5 new items
    rng = np.random.default_rng(0)
    keep = rng.permutation(np.arange(10, 30))
    extra = reference_params("2pl", n=5, seed=99)
    new = ItemParams("2pl", a=np.r_[new_full.a[keep], extra.a], b=np.r_[new_full.b[keep], extra.b])
    ids_new = [ids_ref[k] for k in keep] + [f"new{k}" for k in range(5)]
    for method in ("mean-sigma", "stocking-lord"):
        result = link((ref, ids_ref), (new, ids_new), method=method)
        assert result.n_common == 20
        assert result.inverse().A == pytest.approx(TRUE_A, abs=1e-6)
        assert result.inverse().B == pytest.approx(TRUE_B, abs=1e-6)
    # explicit id list and explicit index pairs give the same answer
    chosen = ids_ref[12:20]
    by_ids = stocking_lord((ref, ids_ref), (new, ids_new), chosen, min_common=5)
    idx_new = [ids_new.index(i) for i in chosen]
    by_idx = stocking_lord(ref, new, (np.arange(12, 20), np.array(idx_new)), min_common=5)
    assert by_ids.A == pytest.approx(by_idx.A, abs=1e-10) and by_ids.B == pytest.approx(by_idx.B, abs=1e-10)
    with pytest.raises(ValueError, match="not in the new calibration: 'q0'"):
        stocking_lord((ref, ids_ref), (new, ids_new), ["q0", "q12"], min_common=2)
    with pytest.raises(ValueError, match="carry no item ids"):
        stocking_lord(ref, new, ["q12", "q13"])


def test_item_bank_inputs():
    from catengine.itembank import ItemBank

    ref = reference_params("4pl", n=12)
    new = apply_to_params(ref, TRUE_A, TRUE_B)
    ids = [f"item{k}" for k in range(12)]
    kw = lambda p: {"a": p.a, "b": p.b, "c": p.c, "d": p.d}  # noqa: E731
    bank_ref = ItemBank.from_params("4pl", ids, bank_id="ref", **kw(ref))
    bank_new = ItemBank.from_params("4pl", ids[::-1], bank_id="new", **{k: v[::-1] for k, v in kw(new).items()})
    result = stocking_lord(bank_ref, bank_new)
    assert result.n_common == 12
    assert result.inverse().A == pytest.approx(TRUE_A, abs=1e-6)
    assert result.inverse().B == pytest.approx(TRUE_B, abs=1e-6)


def test_too_few_common_items():
    ref = reference_params("2pl", n=3)
    new = apply_to_params(ref, TRUE_A, TRUE_B)
    for method in ("mean-sigma", "stocking-lord"):
        with pytest.raises(ValueError, match=r"too few common items to link: 3 .* at least 5 are required"):
            link(ref, new, method=method)
    # lowering the requirement works down to 2, never below
    assert link(ref, new, method="mean-sigma", min_common=2).inverse().A == pytest.approx(TRUE_A)
    one = ItemParams("2pl", a=[1.0], b=[0.0])
    with pytest.raises(ValueError, match="too few common items to link: 1 .* at least 2"):
        stocking_lord(one, one, min_common=1)
    # mean-sigma counts only items with a > 0
    a = ref.a.copy()
    a[0] = -1.0
    bad = ItemParams("2pl", a=a, b=ref.b)
    with pytest.raises(ValueError, match=r"too few common items with slope a > 0.1 and \|difficulty\| <= 6 for mean-sigma: 2 of 3 \(1 skipped\)"):
        mean_sigma(bad, bad, min_common=3)


def test_misaligned_or_mismatched_inputs():
    ref = reference_params("2pl", n=10)
    with pytest.raises(ValueError, match="cannot be aligned by position"):
        stocking_lord(ref, reference_params("2pl", n=8))
    with pytest.raises(ValueError, match="same response model"):
        stocking_lord(ref, reference_params("4pl", n=10))
    with pytest.raises(ValueError, match="unknown linking method 'haebara'"):
        link(ref, ref, method="haebara")
    with pytest.raises(TypeError, match="must be an ItemParams"):
        stocking_lord({"a": 1}, ref)


def test_custom_grid_and_weights():
    ref = reference_params("lart")
    new = apply_to_params(ref, TRUE_A, TRUE_B)
    grid = np.linspace(-3, 3, 25)
    result = stocking_lord(ref, new, quadrature=grid, theta_weights=np.ones(25), start=(1.0, 0.0))
    assert result.inverse().A == pytest.approx(TRUE_A, abs=1e-6)
    with pytest.raises(ValueError, match="theta_weights has shape"):
        stocking_lord(ref, new, quadrature=grid, theta_weights=np.ones(3))
    with pytest.raises(ValueError, match="at least 5 points"):
        stocking_lord(ref, new, quadrature=3)


def test_linking_result_is_frozen_and_validated():
    r = LinkingResult(2.0, 1.0, method="mean-sigma", n_common=10, criterion=0.0)
    with pytest.raises(AttributeError):
        r.A = 3.0
    with pytest.raises(ValueError, match="A must be finite and > 0"):
        LinkingResult(-1.0, 0.0, method="x", n_common=3, criterion=0.0)
    d = r.to_dict()
    assert d["direction"] == "theta_ref = A * theta_new + B" and d["A"] == 2.0
    assert r.inverse().inverse().A == pytest.approx(2.0) and r.inverse().inverse().B == pytest.approx(1.0)


def test_items_nobody_solves_do_not_break_linking():
    # An item nobody solves gets a slope ~0 and a huge intercept from some calibrations
    # (difficulty -b/a ~ 1e16): mean-sigma must skip it, Stocking-Lord must not start from it.
    rng = np.random.default_rng(5)
    a = rng.uniform(0.5, 1.5, 40)
    b = rng.normal(0, 1, 40)
    a[:3], b[:3] = 2.7e-17, -5.0
    ref = ItemParams("2pl", a=a, b=b)
    new = apply_to_params(ref, 1 / 1.3, -0.4 / 1.3)  # new scale: theta_new = (theta_ref - 0.4) / 1.3
    for method in ("mean-sigma", "stocking-lord"):
        result = link(ref, new, method=method)
        assert result.A == pytest.approx(1.3, rel=1e-5) and result.B == pytest.approx(0.4, abs=1e-5)
    assert link(ref, new, method="mean-sigma").n_excluded == 3
