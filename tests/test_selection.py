"""Item selection: kernels vs naive twins, the selector contract suite, exposure and content control."""

import math

import numpy as np
import pytest

import naive_engine as naive
from catengine.errors import BankExhaustedError
from catengine.estimation import MAPEstimator, ResponseState, TraitEstimate
from catengine.models.expected_information import expected_item_information, gauss_hermite_normal
from catengine.selection import (
    DoublyRobustSelection,
    SELECTORS,
    AOptimalInformation,
    ContentBalance,
    DOptimalInformation,
    ItemTable,
    KullbackLeiblerIndex,
    LaRTReplicationSelection,
    MaxFisherInformation,
    PosteriorExpectedInformation,
    PosteriorWeightedInformation,
    RandomSelection,
    RandomisedSelection,
    Randomesque,
    ScoreFactorDOptimal,
    SelectionState,
    SympsonHetter,
    ThetaTargetedInformation,
)
from catengine.selection import _kernels as K
from catengine.models.score_factors import ScoreFactors
from catengine.session import CATSession, calibrate_sympson_hetter
from catengine.stopping import MaxItems

MODELS = {"2pl": 0, "4pl": 1, "lart": 2}


def _table(model, n=50, seed=0, negative_a=3):
    """A bank and its item table, with score factors (two, random) so that every selector runs."""
    bank = naive.make_bank(model, n, seed, b_sd=True, negative_a=negative_a)
    g = np.random.default_rng(seed)
    factors = ScoreFactors(g.normal(0, 1.2, (n, 2)), g.normal(0, 1, n))
    return bank, ItemTable(bank.params, bank.item_ids, b_sd=bank.item_metadata("b_sd"), metadata=bank.item_metadata,
                           score_factors=factors)


def _run(kernel, k, *args):
    idx = np.empty(k, dtype=np.int64)
    val = np.empty(k)
    cnt = kernel(*args, k, idx, val)
    return idx[:cnt], val[:cnt]


def _full_scan(t):
    """order = bank order, bounds = +inf: the kernels then score every eligible item."""
    return np.arange(t.n_items, dtype=np.int64), np.full(t.n_items, np.inf)


# ----------------------------------------------------------------------------- scalar kernels
def test_probit_h_fast_matches_series_form():
    # against the plain-Python twin (probit_h_fast delegates to the library's own series beyond |z| = 8,
    # so that cannot be the reference)
    import naive_models

    for z in np.concatenate([np.linspace(-40, 40, 4001), [0.0, 7.999, 8.0, 8.001]]):
        assert K.probit_h_fast(z) == pytest.approx(naive_models.probit_info_h(z), rel=1e-12, abs=1e-300)


@pytest.mark.parametrize("model", MODELS)
def test_info_at_matches_textbook_formula(model):
    rng = np.random.default_rng(1)
    for _ in range(200):
        z, a, c, d = rng.normal(0, 4), rng.uniform(-1, 2.5), rng.uniform(0, 0.3), rng.uniform(0.7, 1)
        if model != "4pl":
            c, d = 0.0, 1.0
        assert K.info_at(MODELS[model], z, a, c, d) == pytest.approx(naive.info(MODELS[model], z, a, c, d), rel=1e-9, abs=1e-300)


# ----------------------------------------------------------------------------- top-k kernels vs naive
@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("k", [1, 4])
def test_topk_kernels_match_naive_and_pruning_is_exact(model, k):
    bank, t = _table(model)
    p = t.params
    code = MODELS[model]
    rng = np.random.default_rng(2)
    for trial in range(6):
        theta = rng.normal(0, 1.5)
        eligible = rng.random(t.n_items) < 0.7
        # point information
        scores = [naive.info(code, p.a[j] * theta + p.b[j], p.a[j], t.c[j], t.d[j]) for j in range(t.n_items)]
        want = naive.topk(scores, eligible, k)
        for order, bound in ((t.info_order, t.info_bound), _full_scan(t)):
            idx, val = _run(K.topk_info, k, code, np.array([theta]), np.ones(1), p.a, p.b, t.c, t.d, eligible, order, bound)
            assert list(idx) == want
            np.testing.assert_allclose(val, [scores[j] for j in want], rtol=1e-9, atol=1e-300)
        # posterior-weighted information (several nodes)
        nodes, w = theta + np.array([-0.5, 0.0, 0.4]), np.array([0.2, 0.5, 0.3])
        scores = [sum(wq * naive.info(code, p.a[j] * tq + p.b[j], p.a[j], t.c[j], t.d[j]) for tq, wq in zip(nodes, w))
                  for j in range(t.n_items)]
        idx, _ = _run(K.topk_info, k, code, nodes, w, p.a, p.b, t.c, t.d, eligible, t.info_order, t.info_bound)
        assert list(idx) == naive.topk(scores, eligible, k)
        # posterior-expected information (Gauss-Hermite vs adaptive quadrature)
        x, wq = gauss_hermite_normal(40)
        scores = [naive.expected_info(code, theta, p.a[j], p.b[j], t.b_sd[j], t.c[j], t.d[j]) for j in range(t.n_items)]
        idx, val = _run(K.topk_expected_info, k, code, theta, p.a, p.b, t.b_sd, t.c, t.d, x, wq, eligible,
                        t.info_order, t.info_bound)
        assert list(idx) == naive.topk(scores, eligible, k)
        np.testing.assert_allclose(val, [scores[j] for j in idx], rtol=1e-7)
        # KL index
        kn, kw = theta + np.linspace(-0.6, 0.6, 5), np.full(5, 0.24)
        scores = [naive.kl_index(code, theta, kn, kw, p.a[j], p.b[j], t.c[j], t.d[j]) for j in range(t.n_items)]
        idx, val = _run(K.topk_kl, k, code, theta, kn, kw, p.a, p.b, t.c, t.d, eligible)
        assert list(idx) == naive.topk(scores, eligible, k)
        np.testing.assert_allclose(val, [scores[j] for j in idx], rtol=1e-8, atol=1e-14)


@pytest.mark.parametrize("criterion", [0, 1, 2])
def test_lart_criteria_match_naive_2x2_algebra(criterion):
    bank, t = _table("lart")
    p = t.params
    rng = np.random.default_rng(3)
    for _ in range(5):
        theta = rng.normal()
        L = rng.normal(size=(2, 2))
        P = L @ L.T + np.eye(2)
        eligible = rng.random(t.n_items) < 0.8
        u = [naive.info(2, p.a[j] * theta + p.b[j], p.a[j]) for j in range(t.n_items)]
        scores = [naive.lart_score(criterion, u[j], t.cot_info[j], P) for j in range(t.n_items)]
        for order, bound in ((t.info_order, t.info_bound), _full_scan(t)):
            idx, val = _run(K.topk_lart, 3, criterion, theta, p.a, p.b, t.cot_info, P[0, 0], P[0, 1], P[1, 1],
                            eligible, order, bound, t.cot_info_max)
            assert list(idx) == naive.topk(scores, eligible, 3)
            np.testing.assert_allclose(val, [scores[j] for j in idx], rtol=1e-9)


@pytest.mark.parametrize("model", ["2pl", "4pl"])
def test_pei_scores_equal_models_expected_information(model):
    """The fused selection kernel and catengine.models.expected_information agree to rounding."""
    bank, t = _table(model, negative_a=0)
    p = t.params
    theta = 0.37
    x, w = gauss_hermite_normal(9)
    idx, val = _run(K.topk_expected_info, t.n_items, MODELS[model], theta, p.a, p.b, t.b_sd, t.c, t.d, x, w,
                    np.ones(t.n_items, bool), t.info_order, t.info_bound)
    ref = expected_item_information(p, t.b_sd, theta, n_nodes=9)
    np.testing.assert_allclose(val, ref[idx], rtol=1e-12)


def test_items_with_nonpositive_slope_carry_no_information():
    bank, t = _table("2pl", negative_a=5)
    p = t.params
    assert np.all(t.info_bound[:5] == 0)
    eligible = np.zeros(t.n_items, bool)
    eligible[[0, 1, 10]] = True
    idx, val = _run(K.topk_info, 3, 0, np.array([0.0]), np.ones(1), p.a, p.b, t.c, t.d, eligible, t.info_order, t.info_bound)
    assert list(idx) == [10, 0, 1] and val[1] == 0 and val[2] == 0


# ----------------------------------------------------------------------------- the contract suite
def _selectors_for(model):
    common = [MaxFisherInformation(), PosteriorExpectedInformation(), PosteriorWeightedInformation(),
              KullbackLeiblerIndex(), RandomSelection(), RandomisedSelection(),
              RandomisedSelection(weight="information", uniform_share=0.1), ScoreFactorDOptimal(),
              DoublyRobustSelection(), DoublyRobustSelection(adaptive=MaxFisherInformation(), share=0.25)]
    if model == "lart":
        common += [ThetaTargetedInformation(), DOptimalInformation(), AOptimalInformation(),
                   LaRTReplicationSelection(n_fixed=3)]
    return common


def test_every_registered_selector_is_in_the_contract_suite():
    covered = {type(s) for m in MODELS for s in _selectors_for(m)}
    assert covered == set(SELECTORS.values())


_EXPOSURE = [(), (Randomesque(3),), (ContentBalance("benchmark", {"alpha": 0.5, "beta": 0.3, "gamma": 0.2}),)]


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("exposure", _EXPOSURE, ids=["plain", "randomesque", "content"])
def test_selector_contract(model, exposure):
    """Every selector x exposure control: never an administered, excluded or ineligible item, never
    the same item twice, deterministic given the rng, and a clear error once the bank is exhausted."""
    bank = naive.make_bank(model, 24, seed=4, b_sd=True, negative_a=2)
    g = np.random.default_rng(4)  # score factors too, for ScoreFactorDOptimal (the others ignore them)
    bank = bank.with_score_factors(g.normal(0, 1.2, (24, 2)), g.normal(0, 1, 24), {"dims": 2})
    oracle, _ = naive.make_oracle(bank.params, seed=9)
    for selector in _selectors_for(model):
        runs = []
        for _ in range(2):
            s = CATSession(bank, selector=selector, exposure=exposure, stopping=MaxItems(24), rng=42)
            s.exclude("q0005")
            seen = []
            kept = None  # the proposal pending when another item was answered: it stays pending
            while True:
                if s.n_items == 8 and kept is None:  # an answer the engine did not propose
                    kept = s.next_item()
                    free = next(i for i in bank.item_ids if i not in seen and i != "q0005" and i != kept)
                    s.record(free, 1)
                    seen.append(free)
                    continue
                try:
                    item = s.next_item()
                except BankExhaustedError as exc:
                    assert "exhausted" in str(exc)
                    break
                mask = s.eligible_mask()
                j = bank.index_of(item)
                if s.n_items == 9:  # the kept proposal comes back, eligible when it was proposed
                    assert item == kept
                else:
                    assert mask[j], f"{type(selector).__name__} proposed ineligible {item}"
                assert item not in seen and item != "q0005"
                assert s.next_item() == item  # stable until answered
                c, t = oracle[j]
                s.record(item, c, t)
                seen.append(item)
            assert len(seen) == len(set(seen)) == 23
            assert s.finished
            runs.append(seen)
        assert runs[0] == runs[1], f"{type(selector).__name__} is not deterministic given the rng"


@pytest.mark.parametrize("selector", [MaxFisherInformation(), PosteriorWeightedInformation(), KullbackLeiblerIndex(),
                                      RandomSelection()])
def test_candidates_are_distinct_eligible_and_best_first(selector):
    bank, t = _table("2pl")
    rng = np.random.default_rng(5)
    s = ResponseState(t.params)
    for j in (3, 7, 11):
        s.add(j, 1)
    est = MAPEstimator().estimate(t.params, s)
    eligible = ~s.administered & (rng.random(t.n_items) < 0.6)
    state = SelectionState(est, eligible, s, t, lambda th: MAPEstimator().log_posterior(t.params, s, th))
    idx, val = selector.candidates(t.params, state, np.random.default_rng(0), 6)
    assert len(set(idx.tolist())) == len(idx) == 6
    assert eligible[idx].all()
    if not isinstance(selector, RandomSelection):
        assert np.all(np.diff(val) <= 0)
    with pytest.raises(BankExhaustedError):
        selector.candidates(t.params, SelectionState(est, np.zeros(t.n_items, bool), s, t), np.random.default_rng(0), 1)
    with pytest.raises(ValueError, match="k must be"):
        selector.candidates(t.params, state, np.random.default_rng(0), 0)


def test_pei_needs_b_sd_and_lart_selectors_need_lart():
    bank = naive.make_bank("2pl", 10, seed=1, b_sd=False)
    with pytest.raises(ValueError, match="b_sd"):
        CATSession(bank, selector=PosteriorExpectedInformation())
    with pytest.raises(ValueError, match="response models"):
        CATSession(bank, selector=ThetaTargetedInformation())
    with pytest.raises(ValueError, match="n_nodes"):
        PosteriorExpectedInformation(n_nodes=0)
    with pytest.raises(ValueError, match="delta_scale"):
        KullbackLeiblerIndex(delta_scale=-1)


def test_pei_with_zero_b_sd_is_point_information():
    bank = naive.make_bank("4pl", 40, seed=2, b_sd=False)
    t = ItemTable(bank.params, bank.item_ids, b_sd=np.zeros(40))
    s = ResponseState(bank.params)
    est = TraitEstimate(theta=0.4, theta_sd=1.0, n_items=0)
    state = SelectionState(est, np.ones(40, bool), s, t)
    a = PosteriorExpectedInformation().candidates(bank.params, state, None, 5)
    b = MaxFisherInformation().candidates(bank.params, state, None, 5)
    assert list(a[0]) == list(b[0])
    np.testing.assert_allclose(a[1], b[1], rtol=1e-12)


def test_lart_replication_fixed_start_then_probit_information():
    bank = naive.make_bank("lart", 30, seed=3)
    oracle, _ = naive.make_oracle(bank.params, seed=1)
    sel = LaRTReplicationSelection(fixed_items=(4, 2, 9))
    s = CATSession(bank, selector=sel, stopping=MaxItems(30), rng=0)
    order = []
    for _ in range(6):
        item = s.next_item()
        order.append(bank.index_of(item))
        s.record(item, *oracle[bank.index_of(item)])
    assert order[:3] == [4, 2, 9]
    # afterwards: plain probit information at the estimate (CoT information not in the criterion)
    s2 = CATSession(bank, selector=MaxFisherInformation(), stopping=MaxItems(30), rng=0)
    for j in order[:3]:
        s2.record(bank.item_ids[j], *oracle[j])
    assert bank.index_of(s2.next_item()) == order[3]
    with pytest.raises(ValueError, match="repeat"):
        LaRTReplicationSelection(fixed_items=(1, 1))


def test_lart_theta_targeted_uses_cot_information():
    """Two items with equal accuracy information: the one with more CoT information wins when theta
    and tau are correlated (it sharpens tau, hence theta)."""
    from catengine import ItemBank

    bank = ItemBank.from_params("lart", ["x", "y"], bank_id="two", a=[1.0, 1.0], b=[0.0, 0.0], omega=[6, 6],
                                phi=[0.5, 2.0], lam=[1.0, 1.0], rho=-0.7, cot_offset=1.0)
    s = CATSession(bank, selector=ThetaTargetedInformation())
    assert s.next_item() == "y"
    s0 = CATSession(bank, selector=MaxFisherInformation())
    assert s0.next_item() == "x"  # tie on probit information: lower index


# ----------------------------------------------------------------------------- exposure and content control
def test_randomesque_draws_among_the_top_k():
    bank, t = _table("2pl", n=60, negative_a=0)
    est0 = CATSession(bank, rng=0).estimate
    state = SelectionState(est0, np.ones(60, bool), ResponseState(bank.params), t)
    top5 = set(MaxFisherInformation().candidates(bank.params, state, None, 5)[0].tolist())
    # exposure control acts on an adaptive selector's choice (the default's opening steps are random draws)
    firsts = [CATSession(bank, selector=MaxFisherInformation(), exposure=Randomesque(5), rng=seed).next_item()
              for seed in range(60)]
    picked = {bank.index_of(i) for i in firsts}
    assert picked == top5  # every one of the 5 best shows up, nothing else
    with pytest.raises(ValueError):
        Randomesque(0)


def test_sympson_hetter_lottery_and_side_file(tmp_path):
    bank = naive.make_bank("2pl", 20, seed=6)
    control = tuple([0.0] * 10 + [1.0] * 10)
    sh = SympsonHetter(control=control, target_rate=0.3)
    s = CATSession(bank, exposure=sh, stopping=MaxItems(20), rng=1)
    seen = []
    for _ in range(10):
        item = s.next_item()
        seen.append(bank.index_of(item))
        s.record(item, 1)
    assert all(j >= 10 for j in seen)  # K = 0 items are never administered while others remain
    item = s.next_item()  # the lottery never leads to a dead end
    assert bank.index_of(item) < 10
    path = sh.save(tmp_path / "sh.json", bank_id=bank.bank_id, bank_version=bank.version, item_ids=bank.item_ids)
    assert SympsonHetter.load(path, item_ids=bank.item_ids, bank_id=bank.bank_id) == sh
    with pytest.raises(FileExistsError):
        sh.save(path, bank_id=bank.bank_id, bank_version=0, item_ids=bank.item_ids)
    with pytest.raises(ValueError, match="calibrated for bank"):
        SympsonHetter.load(path, item_ids=bank.item_ids, bank_id="other")
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        SympsonHetter(control=(0.5, 1.5))
    with pytest.raises(ValueError, match="control parameters for a bank"):
        CATSession(bank, exposure=SympsonHetter(control=(1.0, 1.0)))


def test_sympson_hetter_calibration_caps_exposure():
    """Calibrated by simulation, the control parameters bring the maximum exposure rate from ~1
    (the same best first items for everybody) to near the target."""
    bank = naive.make_bank("2pl", 40, seed=7)
    stop = MaxItems(5)
    mfi = MaxFisherInformation()  # an adaptive selector: the default's opening steps are random draws already
    sh = calibrate_sympson_hetter(bank, target_rate=0.3, selector=mfi, stopping=stop, n_simulees=80, n_iter=6, rng=3)
    assert len(sh.control) == 40 and min(sh.control) < 1

    def max_rate(exposure, seed):
        counts = np.zeros(40)
        rng = np.random.default_rng(seed)
        for _ in range(120):
            oracle, _ = naive.make_oracle(bank.params, seed=int(rng.integers(1 << 30)))
            s = CATSession(bank, selector=mfi, exposure=exposure, stopping=stop, rng=rng)
            while not s.finished:
                item = s.next_item()
                counts[bank.index_of(item)] += 1
                s.record(item, oracle[bank.index_of(item)][0])
        return counts.max() / 120

    assert max_rate((), 11) > 0.9
    assert max_rate((sh,), 11) < 0.45  # target 0.3, sampling noise with 120 simulees


def test_content_balance_tracks_targets():
    bank = naive.make_bank("2pl", 90, seed=8)
    groups = bank.item_metadata("benchmark")
    targets = {"alpha": 0.5, "beta": 0.25, "gamma": 0.25}
    oracle, _ = naive.make_oracle(bank.params, seed=2)
    s = CATSession(bank, exposure=ContentBalance("benchmark", targets), stopping=MaxItems(20), rng=0)
    while not s.finished:
        item = s.next_item()
        s.record(item, oracle[bank.index_of(item)][0])
    got = [groups[bank.index_of(i)] for i in s.administered]
    for g, p in targets.items():
        assert abs(got.count(g) / 20 - p) <= 0.051
    with pytest.raises(ValueError, match="sum to 1"):
        ContentBalance("benchmark", {"alpha": 0.5})
    with pytest.raises(ValueError, match="no item"):
        CATSession(bank, exposure=ContentBalance("benchmark", {"alpha": 0.5, "zeta": 0.5}))
    with pytest.raises(ValueError, match="no per-item field"):
        CATSession(bank, exposure=ContentBalance("subject_area", {"x": 1.0}))


def test_content_balance_falls_back_when_a_group_is_used_up():
    bank = naive.make_bank("2pl", 30, seed=9)
    groups = bank.item_metadata("benchmark")
    only = {"alpha": 1.0}
    s = CATSession(bank, exposure=ContentBalance("benchmark", only), stopping=MaxItems(30), rng=0)
    n_alpha = int(np.sum(groups == "alpha"))
    got = []
    for _ in range(n_alpha + 2):
        item = s.next_item()
        got.append(groups[bank.index_of(item)])
        s.record(item, 0)
    assert got[:n_alpha] == ["alpha"] * n_alpha and "alpha" not in got[n_alpha:]


def test_selection_state_reads_no_more_than_it_needs():
    """Selection must not mutate the eligibility mask it is given."""
    bank, t = _table("lart")
    s = ResponseState(t.params)
    est = MAPEstimator().estimate(t.params, s)
    mask = np.ones(t.n_items, bool)
    mask[::3] = False
    before = mask.copy()
    for sel in _selectors_for("lart"):
        sel.candidates(t.params, SelectionState(est, mask, s, t, lambda th: MAPEstimator().log_posterior(t.params, s, th)),
                       np.random.default_rng(0), 3)
    assert np.array_equal(mask, before)
    assert math.isfinite(est.theta)
