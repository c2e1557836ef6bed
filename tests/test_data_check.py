"""The data check (``calibration.data_check``): it flags the ChemBench matrix as it was scrambled
(13 LLMs with two blocks of rows swapped), stays quiet on the realigned ChemBench, MATH500, AMC23
and LRM data, flags simulated 2PL matrices with a rotated block and not clean ones, and its
reference distribution holds. ``calibration fit`` prints it and stores its record in the bank."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from calibration import ResponseData, check_response_data
from calibration.data_check import DataCheck, _reference, drawdown_p_value, drawdown_threshold
from calibration.io import load_responses
from catengine.models import ItemParams
from real_data import CHEMBENCH, LRM_TOKEN_ECONOMY, lart_files

#: the 13 LLMs whose rows 854-1853 and 1854-2853 were swapped in the scrambled ChemBench matrix
#: (data/chembench/SOURCE.md, group G1)
G1 = ("Mistral-Large-2", "Command-R+", "Llama-3.1-405B-Instruct", "Llama-3.1-8B-Instruct", "GPT-4o", "PaperQA2",
      "Gemma-1.1-7B-it", "Gemma-2-9B-it", "Llama-2-70B Chat", "Llama-3-8B-Instruct", "o1",
      "Phi-3-Medium-4k-Instruct", "GPT-3.5 Turbo Zero-T")
#: the two LLMs whose answers agree too little with the others' for the block scan (measured r 0.01, 0.06)
WEAK = ("Llama-2-70B Chat", "Galatica-120b")


def scrambled_chembench(data: ResponseData) -> ResponseData:
    """The ChemBench matrix as it was shipped before its realignment: rows 854-1853 and 1854-2853
    (items, 0-based) swapped back in the 13 G1 columns (the inverse of the fix in SOURCE.md)."""
    y = np.array(data.correct)
    g1 = np.isin(np.array(data.subject_ids), G1)
    assert g1.sum() == 13
    first, second = y[g1, 854:1854].copy(), y[g1, 1854:2854].copy()
    y[np.ix_(g1, np.arange(854, 1854))] = second
    y[np.ix_(g1, np.arange(1854, 2854))] = first
    return ResponseData.from_arrays(y, subject_ids=data.subject_ids, item_ids=data.item_ids)


@pytest.fixture(scope="module")
def chembench():
    return load_responses(CHEMBENCH / "responses_models_x_items.csv.gz", wide=True)


def simulate_2pl(seed, n_llms=30, n_items=1000, slope=2.0):
    """0/1 answers of a 2PL with LLM-like slopes (the agreement of real ChemBench LLMs, r about 0.6)."""
    rng = np.random.default_rng(seed)
    theta = rng.standard_normal(n_llms)
    a = slope * np.exp(rng.normal(0.0, 0.3, n_items))
    b = rng.normal(0.0, 1.0, n_items)
    p = 1.0 / (1.0 + np.exp(-a * (theta[:, None] - b)))
    return (rng.random((n_llms, n_items)) < p).astype(np.int8), theta, a, b


def rotate_block(y, rows, start, stop, shift):
    """``rows``' answers on items start..stop-1 rotated by ``shift`` (a shift within a block)."""
    y = y.copy()
    block = np.ix_(rows, np.arange(start, stop))
    y[block] = np.roll(y[block], shift, axis=1)
    return y


# ----------------------------------------------------------------------------- ChemBench


def test_scrambled_chembench_is_flagged_with_its_two_groups_and_the_swap(chembench):
    check = check_response_data(scrambled_chembench(chembench))
    ids = chembench.subject_ids
    assert check.is_flagged
    # every LLM the scan can assess is flagged: on items 854-2853 G1 and G2 disagree, so each
    # LLM's agreement with the others' mean drops there (measured drawdowns 2.79-6.47, threshold 2.31)
    assert set(check.flagged_llms) == set(ids) - set(WEAK)
    assert not check.anti_agreement.any()
    flagged = check.statistic[check.flagged]
    assert flagged.min() > 2.7 and check.thresholds["scan_threshold"] == pytest.approx(2.31, abs=0.01)
    assert set(np.array(ids)[~check.assessable]) == set(WEAK)
    (block,) = check.blocks
    assert 840 <= block.start <= 860 and block.stop == 2854
    assert block.groups == (tuple(s for s in ids if s not in G1 and s not in WEAK),
                            tuple(s for s in ids if s in G1 and s not in WEAK))
    assert block.between_corr_in < 0.05 and block.between_corr_out > 0.85
    assert all(c > 0.8 for a, b, c in block.trace if b <= 854)
    assert all(abs(c) < 0.2 for a, b, c in block.trace if a >= 854)
    # the two swapped blocks, item-exact
    assert [(a, b, k) for a, b, k, _ in block.realignment] == [(854, 1854, 1000), (1854, 2854, -1000)]
    assert all(c > 0.85 for *_, c in block.realignment)
    text = check.summary()
    assert "FLAGGED: 20 LLM(s) stop agreeing" in text
    assert "items 854..1853 go with group B's on items 1854..2853" in text
    record = json.loads(check.to_json())
    assert record["flagged"] == list(check.flagged_llms)
    assert record["blocks"][0]["realignment"][0][:3] == [854, 1854, 1000]
    assert len(check.to_json()) < 4000


def test_realigned_chembench_is_quiet(chembench):
    check = check_response_data(chembench)
    assert not check.is_flagged and not check.blocks
    # measured: largest drawdown 1.24 (Gemma-1.1-7B-it), against the threshold 2.31
    assert np.nanmax(check.statistic) < 1.5
    assert set(np.array(chembench.subject_ids)[~check.assessable]) == set(WEAK)
    # an assessable LLM would be flagged once a small share of its items were misaligned in one block
    assert np.nanmedian(check.min_detectable_fraction) < 0.1
    text = check.summary()
    assert "no misaligned block found" in text and "Llama-2-70B Chat (r = 0.01)" in text


# ----------------------------------------------------------------------------- the other shipped data


def test_math500_is_quiet():
    accuracy, _ = lart_files("math500")
    data = load_responses(accuracy, wide=True)
    check = check_response_data(data)
    assert check.n_llm_groups == 79  # the zero- and one-shot runs of one LLM leave the reference together
    assert not check.is_flagged
    assert np.nanmax(check.statistic) < check.thresholds["scan_threshold"] - 0.4  # measured 1.99 against 2.53
    assert check.assessable.sum() >= 50


@pytest.mark.parametrize("name", ["amc23", "lrm"])
def test_small_benchmarks_are_quiet_and_say_they_have_too_few_items(name):
    if name == "amc23":
        data = load_responses(lart_files("amc23")[0], wide=True)
    else:
        data = load_responses(LRM_TOKEN_ECONOMY / "R_run1_models_x_prompts.csv.gz", wide=True)
    check = check_response_data(data)
    assert not check.is_flagged and check.too_few_items
    assert f"too few items ({data.n_items})" in check.summary()
    assert check.thresholds["items_needed"] > data.n_items
    assert json.loads(check.to_json())["too_few_items"] is True


# ----------------------------------------------------------------------------- simulated


def test_clean_simulated_matrices_are_not_flagged():
    # measured false-alarm rates (any flag per matrix): 11/1000 seeds for 30 x 800 items (slope 2),
    # 0/300 for 40 x 600 (slope 1), 2/300 for 22 x 2854, 0/300 for 158 x 500 with near-zero and
    # near-perfect LLMs; the family-wise level is 1%
    for seed in range(12):
        y, *_ = simulate_2pl(seed)
        check = check_response_data(y)
        assert not check.is_flagged, seed
    # near-zero and near-perfect LLMs among them
    rng = np.random.default_rng(0)
    for seed in range(4):
        y, theta, a, b = simulate_2pl(seed, n_llms=40, n_items=600, slope=1.0)
        theta[:8] = np.r_[rng.uniform(-5, -3.5, 4), rng.uniform(3.5, 5, 4)]
        y[:8] = rng.random((8, 600)) < 1.0 / (1.0 + np.exp(-a * (theta[:8, None] - b)))
        check = check_response_data(y)
        assert not check.is_flagged and not check.assessable[:8].any(), seed


def test_a_block_rotated_for_a_few_llms_is_flagged():
    rows, start, stop = np.array([1, 2, 3]), 300, 700
    exact = 0
    for seed in range(10):
        y, *_ = simulate_2pl(seed)
        check = check_response_data(rotate_block(y, rows, start, stop, 200))
        flagged = set(np.flatnonzero(check.flagged).tolist())
        assert flagged and flagged <= set(rows.tolist()), seed
        exact += flagged == set(rows.tolist())
        (block,) = check.blocks
        assert abs(block.start - start) < 60 and abs(block.stop - stop) < 60, seed
        assert set(block.groups[0]) >= {f"row_{i}" for i in flagged}
    assert exact >= 7  # measured 153 of 200 seeds flag exactly the three


def test_two_camps_and_their_realignment_are_found_in_a_simulated_swap():
    y, *_ = simulate_2pl(5, n_llms=24, n_items=1200)
    camp = np.arange(10)
    swapped = y.copy()
    swapped[np.ix_(camp, np.arange(400, 800))] = y[np.ix_(camp, np.arange(800, 1200))]
    swapped[np.ix_(camp, np.arange(800, 1200))] = y[np.ix_(camp, np.arange(400, 800))]
    check = check_response_data(swapped)
    (block,) = check.blocks
    # the groups hold the LLMs the scan can assess (row 9, the strongest, agrees too little: r 0.27)
    assessable = set(np.flatnonzero(check.assessable).tolist())
    assert {int(s.split("_")[1]) for s in block.groups[0]} == set(camp.tolist()) & assessable
    assert {int(s.split("_")[1]) for s in block.groups[1]} == set(range(10, 24)) & assessable
    assert [(a, b, k) for a, b, k, _ in block.realignment] == [(400, 800, 400), (800, 1200, -400)]


def test_inverted_coding_is_flagged_as_anti_agreement():
    y, *_ = simulate_2pl(3)
    y[4] = 1 - y[4]
    check = check_response_data(y)
    assert check.anti_agreement.tolist() == [i == 4 for i in range(30)]
    assert "row_4" in check.flagged_llms and "coded 1 = wrong" in check.summary()


def test_missing_answers_and_llm_groups():
    y, *_ = simulate_2pl(7, n_llms=12, n_items=300)
    y = y.astype(float)
    y[0, :50] = np.nan
    y[1, 100:] = -1
    groups = np.repeat(np.arange(6), 2)
    check = check_response_data(y, groups=groups)
    assert check.n_llm_groups == 6 and np.isfinite(check.statistic).all()
    # each row's reference is the mean of the rows outside its group
    obs = ~np.isnan(y) & (y >= 0)
    ref = _reference(np.where(obs, y, 0), obs, groups)
    others = np.flatnonzero(groups != groups[2])
    col = 120
    expected = np.nanmean(np.where(obs[others, col], y[others, col], np.nan))
    assert ref[2, col] == pytest.approx(expected)
    with pytest.raises(ValueError, match="row 0, column 1 holds 2$"):
        check_response_data(np.array([[0, 2], [1, 0]]))
    with pytest.raises(ValueError, match="alpha"):
        check_response_data(y, alpha=0.7)


# ----------------------------------------------------------------------------- reference and person fit


def test_drawdown_reference_matches_a_simulated_brownian_bridge():
    rng = np.random.default_rng(0)
    steps = rng.standard_normal((4000, 400))
    steps -= steps.mean(axis=1, keepdims=True)
    steps /= steps.std(axis=1, keepdims=True)
    bridge = np.concatenate([np.zeros((4000, 1)), np.cumsum(steps, axis=1)], axis=1) / math.sqrt(400)
    drawdown = (np.maximum.accumulate(bridge, axis=1) - bridge).max(axis=1)
    for v in (1.5, 1.8):
        assert np.mean(drawdown > v) == pytest.approx(float(drawdown_p_value(v)), abs=0.015)
    assert float(drawdown_p_value(drawdown_threshold(1e-3))) == pytest.approx(1e-3, rel=1e-6)
    assert float(drawdown_p_value(0.2)) == 1.0 and np.isnan(drawdown_p_value(np.nan))


def test_the_reference_is_conservative_for_a_near_zero_llm(chembench):
    # Galatica-120b answers 43 of 2854 items right: its partial sums are a jump process, whose
    # drawdown under random item orders stays below the bridge's
    y = np.array(chembench.correct, dtype=float)
    row = chembench.subject_ids.index("Galatica-120b")
    x = _reference(y, np.ones_like(y, bool), np.arange(y.shape[0]))[row]
    rng = np.random.default_rng(1)
    order = np.argsort(rng.random((1500, y.shape[1])), axis=1)
    yi, xi = y[row][order], x[order]
    c = (yi - yi.mean(axis=1, keepdims=True)) * (xi - xi.mean(axis=1, keepdims=True))
    c -= c.mean(axis=1, keepdims=True)
    bridge = np.cumsum(c, axis=1) / (c.std(axis=1, keepdims=True) * math.sqrt(y.shape[1]))
    bridge = np.concatenate([np.zeros((1500, 1)), bridge], axis=1)
    drawdown = (np.maximum.accumulate(bridge, axis=1) - bridge).max(axis=1)
    for v in (1.2, 1.5, 1.8):
        assert np.mean(drawdown > v) <= float(drawdown_p_value(v)) + 0.01


def test_person_fit_is_lz_at_the_given_traits():
    y, theta, a, b = simulate_2pl(11, n_llms=40, n_items=400, slope=1.0)
    params = ItemParams("2pl", a=a, b=-a * b)  # sigmoid(a theta + b) in the bank's form
    y[0] = 1 - y[0]
    check = check_response_data(y, params=params, theta=theta)
    p = 1.0 / (1.0 + np.exp(-a * (theta[5] - b)))
    l0 = np.sum(y[5] * np.log(p) + (1 - y[5]) * np.log1p(-p))
    e = np.sum(p * np.log(p) + (1 - p) * np.log1p(-p))
    v = np.sum(p * (1 - p) * np.log(p / (1 - p)) ** 2)
    assert check.lz[5] == pytest.approx((l0 - e) / math.sqrt(v), rel=1e-9)
    assert check.loglik_per_answer[5] == pytest.approx(l0 / 400, rel=1e-9)
    assert check.lz[0] < -10 and check.misfit_llms == ("row_0",)
    assert abs(np.median(check.lz[1:])) < 0.5  # at the true items, clean rows' lz is about N(0, 1)
    assert "person fit (lz against the fitted items, in-sample)" in check.summary()
    assert json.loads(check.to_json())["person_fit"]["below"] == ["row_0"]


# ----------------------------------------------------------------------------- calibration fit


def test_calibration_fit_prints_the_check_and_stores_its_record(tmp_path, capsys):
    from calibration.cli import main
    from catengine import open_item_bank

    y, *_ = simulate_2pl(2, n_llms=7, n_items=1200)
    y = rotate_block(y, np.array([1]), 400, 1000, 300)
    src = tmp_path / "acc.nc"
    ResponseData.from_arrays(y, subject_ids=[f"llm{i}" for i in range(7)]).to_netcdf(src)
    out = tmp_path / "banks"
    assert main(["fit", "cbmm", "--responses", str(src), "--bank-id", "shifted", "--out", str(out),
                 "--no-progress"]) == 0  # a flag never stops the fit
    err = capsys.readouterr().err
    assert "data check (7 LLMs x 1200 items): FLAGGED:" in err and "stop agreeing" in err and "person fit" in err
    record = json.loads(open_item_bank(out / "shifted").attrs["data_check"])
    # with 7 LLMs the shifted one is a sixth of every other's reference: they lose agreement too,
    # and the groups single it out
    assert "llm1" in record["flagged"] and record["blocks"][0]["groups"][0] == ["llm1"]
    assert record["person_fit"]["lz_note"] == -3.0
    assert isinstance(check_response_data(y), DataCheck)
