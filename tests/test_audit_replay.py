"""Replay audit: real (here: simulated, known-truth) LLMs' answers through adaptive tests."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from calibration.audit import load_results, render_report, replay_audit, summary_table
from calibration.audit.replay import replay_metrics
from calibration.data import ResponseData


def test_replay_metrics_by_hand():
    full = np.array([0.0, 1.0, -1.0, 2.0])
    full_sd = np.array([0.1, 0.1, 0.2, 0.1])
    est = np.array([0.1, 1.5, -1.1, 1.0])
    sd = np.array([0.3, 0.2, 0.2, 0.5])
    m = replay_metrics(full, full_sd, est, sd)
    assert m["coverage"] == 0.5  # |diff| <= 1.96 sd for LLMs 0 and 2 (1.5 - 1 = 0.5 > 0.392; 1.0 > 0.98)
    # by hand: d^2 = SD_L^2 - SD_full^2 = 0.08, 0.03, 0 (LLM 2: promised 1), 0.24; diffs 0.1, 0.5, -0.1, -1.0
    promised = [2 * stats.norm.cdf(1.96 * 0.3 / 0.08**0.5) - 1, 2 * stats.norm.cdf(1.96 * 0.2 / 0.03**0.5) - 1,
                1.0, 2 * stats.norm.cdf(1.96 * 0.5 / 0.24**0.5) - 1]
    assert m["nominal_coverage"] == pytest.approx(np.mean(promised), abs=1e-4)  # 1.96 vs the exact quantile
    assert m["sd_ratio"] == pytest.approx(((0.01 + 0.25 + 0.01 + 1.0) / (0.08 + 0.03 + 0.0 + 0.24)) ** 0.5)
    assert m["mean_abs_diff"] == pytest.approx(0.425) and m["theta_sd_mean"] == pytest.approx(0.3)
    assert m["kendall_tau"] == pytest.approx(stats.kendalltau(full, est).statistic)


def test_promised_coverage_against_draws():
    # under the model theta_L - theta_full ~ Normal(0, SD_L^2 - SD_full^2): simulate it
    rng = np.random.default_rng(0)
    n = 200_000
    sd = rng.uniform(0.2, 0.5, n)
    full_sd = sd * rng.uniform(0.1, 0.9, n)
    diff = rng.normal(0, np.sqrt(sd**2 - full_sd**2))
    m = replay_metrics(np.zeros(n), full_sd, diff, sd)
    assert m["coverage"] == pytest.approx(m["nominal_coverage"], abs=0.002)  # binomial SE ~ 0.0004
    assert m["sd_ratio"] == pytest.approx(1.0, abs=0.01)


def _simulated(seed, n_llms=160, n_items=200):
    g = np.random.default_rng(seed)
    theta = g.normal(0, 1, n_llms)
    a, b = g.uniform(0.8, 2.0, n_items), g.normal(0, 1, n_items)
    z = a * theta[:, None] + b
    return ResponseData.from_arrays((g.random(z.shape) < 1 / (1 + np.exp(-z))).astype(np.int8))


@pytest.mark.slow
def test_honest_when_the_model_holds():
    """2PL data, 160 LLMs x 200 items, cBMM banks cross-fitted on 3 of 4 folds.

    Random selection: the promised SDs match the replay (RMS ratio 0.98-1.05 when this test was
    written), so the audit reports honesty when there is honesty to report. Adaptive selection
    (maximum information) is already overconfident here (ratio 1.12-1.38): it picks the items
    whose slopes the 120-LLM calibration overestimated -- capitalisation on calibration error
    (van der Linden & Glas, 2000) -- so its ratio must exceed random's.
    """
    ds = replay_audit(_simulated(1), method="cbmm", folds=4, test_lengths=(10, 30), rng=1, progress=False, n_workers=1,
                      bank="fit")
    assert int(ds["failed"].sum()) == 0 and set(np.unique(ds["n_llms"])) == {40}
    m = ds.mean("replication").sel(scoring="irt")
    rand, mfi = m.sel(selector="random"), m.sel(selector="mfi")
    assert np.all((rand.sd_ratio > 0.85) & (rand.sd_ratio < 1.2))
    assert np.all(rand.coverage >= 0.9)
    assert float(mfi.sd_ratio.sel(test_length=30)) > float(rand.sd_ratio.sel(test_length=30))
    for sel in (rand, mfi):  # longer tests agree better with the full benchmark
        assert float(sel.kendall_tau.sel(test_length=30)) > float(sel.kendall_tau.sel(test_length=10))


@pytest.mark.slow
def test_default_banks_are_honest_with_maximum_information_too():
    """The same data through the default path: each fold's bank is ``to_item_bank``'s, with its own
    cross-fitted interval check run on the fold's training LLMs only (nested), so maximum
    information's intervals are honest as well (RMS ratio 0.96-0.97 with these seeds)."""
    ds = replay_audit(_simulated(1), method="cbmm", folds=4, test_lengths=(10, 30), rng=1, progress=False, n_workers=1)
    assert int(ds["failed"].sum()) == 0
    m = ds.mean("replication").sel(scoring="irt")
    for name in ("mfi", "random"):
        sel = m.sel(selector=name)
        assert np.all((sel.sd_ratio > 0.85) & (sel.sd_ratio < 1.2)), name
        assert np.all(sel.coverage >= 0.9), name


def test_resume_missing_answers_and_report(tmp_path):
    data = _simulated(2, n_llms=24, n_items=60)
    Y = data.correct.copy()
    Y[0, :50] = -1  # LLM 0 has 10 answers: too few for a 12-item test, skipped
    Y[1, 5] = -1  # LLM 1 misses one answer: that item is never administered to it
    data = ResponseData.from_arrays(Y)
    kw = dict(method="cbmm", folds=3, test_lengths=(6, 12), selector=("mfi",), rng=4, progress=False, n_workers=1)
    first = replay_audit(data, out=tmp_path / "a", **kw)
    assert int(first["failed"].sum()) == 0 and int(first["n_llms"].sum()) == 23
    records = sorted((tmp_path / "a" / "records").glob("*.nc"))
    records[0].unlink()
    again = replay_audit(data, out=tmp_path / "a", **kw)
    np.testing.assert_array_equal(again["coverage"].values, first["coverage"].values)
    assert load_results(tmp_path / "a")["coverage"].shape == first["coverage"].shape
    assert "promised" in summary_table(first).columns
    paths = render_report(first, tmp_path / "report")
    assert paths["png"].exists() and paths["html"].exists()


def test_sd_scale_rescales_the_promise_exactly():
    # the modes (and, for mfi / random, the items) do not depend on sd_scale: only the SDs move
    # (bank="fit": no stored interval calibration, which an explicit sd_scale would replace)
    data = _simulated(6, n_llms=24, n_items=60)
    kw = dict(method="cbmm", folds=3, test_lengths=(6, 12), rng=2, progress=False, n_workers=1, bank="fit")
    plain = replay_audit(data, **kw)
    wide = replay_audit(data, sd_scale=2.0, **kw)
    np.testing.assert_allclose(wide["sd_ratio"].values, plain["sd_ratio"].values / 2.0, rtol=1e-9)
    np.testing.assert_allclose(wide["mean_abs_diff"].values, plain["mean_abs_diff"].values, rtol=1e-12)
    assert np.all(wide["coverage"].values >= plain["coverage"].values)
    with pytest.raises(ValueError, match="sd_scale must be a finite number > 0"):
        replay_audit(data, sd_scale=0.0, **kw)


def test_bad_input_is_named():
    data = _simulated(3, n_llms=12, n_items=30)
    with pytest.raises(TypeError, match="ResponseData"):
        replay_audit(data.correct)
    with pytest.raises(ValueError, match="needs CoT lengths"):
        replay_audit(data, method="saem")
    with pytest.raises(ValueError, match="folds must lie in 2..12"):
        replay_audit(data, folds=13)
    with pytest.raises(ValueError, match="exceeds the 30 items"):
        replay_audit(data, test_lengths=(10, 40))
    with pytest.raises(ValueError, match="scoring 'lart' needs a LaRT fit"):
        replay_audit(data, scoring="lart", test_lengths=(5,))
    with pytest.raises(ValueError, match="unknown selector"):
        replay_audit(data, selector=("best",), test_lengths=(5,))


def test_cli_replay(tmp_path, capsys):
    from calibration.cli import main

    data = _simulated(5, n_llms=20, n_items=40)
    path = tmp_path / "resp.nc"
    data.to_netcdf(path)
    rc = main(["audit", "--kind", "replay", "--responses", str(path), "--method", "cbmm", "--folds", "2",
               "--test-lengths", "5,10", "--seed", "1", "--workers", "1", "--out", str(tmp_path / "out"),
               "--no-progress", "--no-report"])
    out = capsys.readouterr()
    assert rc == 0 and "promised" in out.out and (tmp_path / "out" / "replay_results.nc").exists()
    rc = main(["audit", "--kind", "replay", "--bank", str(path), "--out", str(tmp_path / "x")])
    assert rc == 2 and "--kind replay takes --responses" in capsys.readouterr().err
    rc = main(["audit", "--bank", str(path), "--responses", str(path), "--out", str(tmp_path / "y")])
    assert rc == 2 and "the other kinds take --bank" in capsys.readouterr().err


@pytest.mark.parametrize("model", ["2pl", "4pl", "lart"])
def test_estimate_from_equals_recording_every_answer(model):
    """replay_llms scores all of an LLM's answers with CATSession.estimate_from (one estimate); a
    session recording them one by one (warm-started each time) must reach the same posterior."""
    import naive_engine as naive
    from catengine.session import CATSession
    from catengine.session.errors import ItemAlreadyAnsweredError
    from catengine.stopping import MaxItems

    bank = naive.make_bank(model, 60, seed=3)
    rng = np.random.default_rng(4)
    items = [bank.item_ids[j] for j in rng.permutation(60)[:45]]
    correct = (rng.random(45) < 0.6).astype(int)
    cot = [float(rng.lognormal(5, 0.5)) for _ in items] if model == "lart" else None
    s = CATSession(bank, stopping=MaxItems(60))
    for k, item in enumerate(items):
        e = s.record(item, int(correct[k]), None if cot is None else cot[k])
    once = CATSession(bank).estimate_from(items, correct, cot)
    assert once.theta == pytest.approx(e.theta, abs=1e-7) and once.theta_sd == pytest.approx(e.theta_sd, rel=1e-7)
    if model == "lart":
        assert once.tau == pytest.approx(e.tau, abs=1e-7) and once.tau_sd == pytest.approx(e.tau_sd, rel=1e-7)
    with pytest.raises(ItemAlreadyAnsweredError, match="appears twice"):
        CATSession(bank).estimate_from(items[:2] + items[:1], [1, 0, 1])


def test_full_length_sd_comes_from_a_session_with_the_same_selector():
    """Each selector's full-benchmark SD is scaled by that selector's own interval curve (the RMS
    ratio compares SD_L and SD_F of one curve); the full-benchmark estimate itself is shared."""
    import json

    from calibration.heldout import replay_llms
    from catengine import ItemBank
    from catengine.estimation.interval_calibration import IntervalCalibration
    from catengine.selection import RandomSelection

    rng = np.random.default_rng(5)
    J, N = 40, 3
    ids = [f"i{k}" for k in range(J)]
    record = {"version": 1, "folds": 4, "n_subjects": 40, "calibration_method": "cbmm", "selection": "pei",
              "curves": {"pei": {"test_length": [5, 20], "c": [1.5, 2.0]},
                         "random": {"test_length": [5, 20], "c": [1.1, 1.3]}}}
    bank = ItemBank.from_params("2pl", ids, bank_id="curves", a=rng.uniform(0.5, 2, J), b=rng.normal(0, 1, J)
                                ).replace_attrs(interval_calibration=json.dumps(record))
    plain = ItemBank.from_params("2pl", ids, bank_id="curves", a=bank.params.a, b=bank.params.b)
    data = ResponseData.from_arrays((rng.random((N, J)) < 0.5).astype(np.int8), item_ids=ids)
    raw = replay_llms(bank, data, range(N), [("default", None), ("random", RandomSelection())], ["irt"], "map", 5, 1, 0)
    ref = replay_llms(plain, data, range(N), [("default", None)], ["irt"], "map", 5, 1, 0)
    cal = IntervalCalibration.from_json(json.dumps(record))
    for r, name in enumerate(["pei", "random"]):
        factor = cal.curve(name).factor(J)
        assert np.allclose(raw["full_sd"][r, 0], ref["full_sd"][0, 0] * factor, rtol=1e-9)
    assert np.array_equal(raw["full"], ref["full"])
