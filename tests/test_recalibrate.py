"""Scripted recalibration: merging, linking to the previous version, idempotence, crash safety, CLI."""

import json

import numpy as np
import pytest
import xarray as xr

from calibration import ResponseData
from calibration.cli import main as calibration_main
from calibration.methods.cbmm.calibrator import CBMMCalibrator
from calibration.recalibration import RecalibrationConfig, diff_banks, merge_responses, recalibrate
from calibration.simulate import draw_item_params, simulate_responses
from catengine import open_item_bank, write_item_bank
from catengine.itembank import list_versions

N_ITEMS = 120


@pytest.fixture(scope="module")
def truth():
    return draw_item_params("2pl", N_ITEMS, rng=11)


def _sample(params, theta, prefix, rng):
    return simulate_responses(params, theta, rng=rng, subject_ids=[f"{prefix}{k}" for k in range(theta.size)],
                              item_ids=[f"item{j}" for j in range(params.n_items)])


def _version_one(tmp_path, truth, n=400, interval_check=False):
    """Version 1 of a simulated bank. The tests of linking, merging, writes and the CLI do not test
    the cross-fitted check, so they skip it (``interval_check=False`` here and in their
    recalibrations); test_recalibration_runs_the_check_by_default covers the default path."""
    theta = np.random.default_rng(1).standard_normal(n)
    theta = (theta - theta.mean()) / theta.std()
    data = _sample(truth, theta, "old", 2)
    fit = CBMMCalibrator(progress=False).fit(data)
    bank = fit.to_item_bank("sim", interval_check=interval_check).with_group("responses", data.to_dataset())
    write_item_bank(bank, tmp_path / "sim")
    return theta, data


def _write_new(tmp_path, data, name="new.nc"):
    return data.to_netcdf(tmp_path / name)


def test_linking_recovers_a_known_change_of_scale(tmp_path, truth):
    # Version 2 is calibrated on a new sample whose abilities are theta' = 1.3 z + 0.4 on the
    # version-1 scale; each fit standardises over its own sample, so linking must find
    # theta_v1 = 1.3 theta_v2 + 0.4. Both samples are standardised exactly (sample moments equal
    # the population ones) so that the only error left is estimation error. Over seeds 0-7 of
    # this design Stocking-Lord landed within 0.03 of A and 0.07 of B: tolerances 0.08 / 0.1.
    _version_one(tmp_path, truth)
    z = np.random.default_rng(3).standard_normal(400)
    theta_new = 1.3 * (z - z.mean()) / z.std() + 0.4
    new = _sample(truth, theta_new, "new", 4)
    config = RecalibrationConfig(bank=tmp_path / "sim", responses=[_write_new(tmp_path, new)], mode="replace",
                                 interval_check=False)
    result = recalibrate(config)
    assert result.status == "written" and result.version == 2
    assert abs(result.linking.A - 1.3) < 0.08
    assert abs(result.linking.B - 0.4) < 0.1
    v2 = open_item_bank(tmp_path / "sim")
    assert v2.parent_version == 1
    scale = v2.scale["linking"]
    assert scale["reference_version"] == 1 and scale["method"] == "stocking-lord"
    # the linked abilities of the new LLMs sit on the version-1 scale: close to their truth
    linked = v2.subjects["theta"].values
    assert abs(linked.mean() - theta_new.mean()) < 0.15
    assert abs(linked.std() / theta_new.std() - 1) < 0.1
    # linked item parameters agree with version 1 (same items, same scale)
    v1 = open_item_bank(tmp_path / "sim", version=1)
    unlinked = result.linking.inverse().transform_params(v2.params)
    gap_linked = np.mean(np.abs(v2.params.b - v1.params.b))
    gap_unlinked = np.mean(np.abs(unlinked.b - v1.params.b))
    assert gap_linked < 0.2 < gap_unlinked  # b SE ~0.15 at N = 400; unlinked is off by ~a * 0.4
    assert abs(np.median(v2.params.a / v1.params.a) - 1) < 0.1 < abs(np.median(unlinked.a / v1.params.a) - 1)
    change_log = json.loads(v2.attrs["change_log"])
    assert change_log["reference_version"] == 1 and change_log["mode"] == "replace"


def test_identical_inputs_write_nothing(tmp_path, truth):
    _version_one(tmp_path, truth)
    new = _sample(truth, np.random.default_rng(5).standard_normal(60), "extra", 6)
    config = RecalibrationConfig(bank=tmp_path / "sim", responses=[_write_new(tmp_path, new)], interval_check=False)
    first = recalibrate(config)
    assert first.status == "written" and first.version == 2
    merged = ResponseData.from_dataset(open_item_bank(tmp_path / "sim").responses)
    assert merged.n_subjects == 460 and merged.n_items == N_ITEMS
    again = recalibrate(config)
    assert again.status == "unchanged" and "already calibrated from these inputs" in again.message
    assert sorted(list_versions(tmp_path / "sim")) == [1, 2]


def test_merging_only_stored_responses_is_a_no_op(tmp_path, truth):
    _, data = _version_one(tmp_path, truth)
    config = RecalibrationConfig(bank=tmp_path / "sim", responses=[_write_new(tmp_path, data.subset(subjects=range(10)))],
                                 interval_check=False)
    assert recalibrate(config).status == "unchanged"
    assert sorted(list_versions(tmp_path / "sim")) == [1]


def test_interrupted_write_keeps_the_previous_version(tmp_path, truth, monkeypatch):
    _version_one(tmp_path, truth)
    before = (tmp_path / "sim" / "sim_v1.nc").read_bytes()
    new = _sample(truth, np.random.default_rng(7).standard_normal(50), "extra", 8)
    path = _write_new(tmp_path, new)

    real = xr.DataTree.to_netcdf

    def dies_mid_write(self, filepath, *args, **kwargs):
        real(self, filepath, *args, **kwargs)
        with open(filepath, "r+b") as fh:  # leave a half-written file behind, then die
            fh.truncate(1000)
        raise KeyboardInterrupt

    monkeypatch.setattr(xr.DataTree, "to_netcdf", dies_mid_write)
    with pytest.raises(KeyboardInterrupt):
        recalibrate(RecalibrationConfig(bank=tmp_path / "sim", responses=[path], interval_check=False))
    monkeypatch.undo()
    assert sorted(p.name for p in (tmp_path / "sim").iterdir()) == ["sim_v1.nc"]
    assert (tmp_path / "sim" / "sim_v1.nc").read_bytes() == before
    assert open_item_bank(tmp_path / "sim").version == 1
    assert recalibrate(RecalibrationConfig(bank=tmp_path / "sim", responses=[path], interval_check=False)).version == 2


@pytest.mark.slow
def test_recalibration_runs_the_check_by_default_and_a_skipped_one_is_said_and_made_up(tmp_path, truth):
    _version_one(tmp_path, truth, n=200, interval_check=True)
    assert "interval_calibration" in open_item_bank(tmp_path / "sim").attrs
    new = _sample(truth, np.random.default_rng(5).standard_normal(40), "extra", 6)
    path = _write_new(tmp_path, new)
    skipped = recalibrate(RecalibrationConfig(bank=tmp_path / "sim", responses=[path], interval_check=False))
    v2 = open_item_bank(tmp_path / "sim")
    assert skipped.version == 2 and "interval_calibration" not in v2.attrs
    assert v2.attrs["interval_calibration_skipped"].startswith("skipped on request")
    checked = recalibrate(RecalibrationConfig(bank=tmp_path / "sim", responses=[path]))  # default: the check runs
    v3 = open_item_bank(tmp_path / "sim")
    assert checked.status == "written" and v3.version == 3
    record = json.loads(v3.attrs["interval_calibration"])
    assert record["n_subjects"] == 240 and record["score_curves"]
    assert recalibrate(RecalibrationConfig(bank=tmp_path / "sim", responses=[path])).status == "unchanged"
    with pytest.raises(ValueError, match="interval_check must be true or false"):
        RecalibrationConfig(bank=tmp_path / "sim", responses=[path], interval_check="no")


def test_new_responses_with_items_in_rows_are_read_transposed(tmp_path, truth):
    from calibration.recalibration import _read_new_responses

    new = _sample(truth, np.random.default_rng(6).standard_normal(12), "extra", 7)
    flipped = tmp_path / "items_x_llms.csv"
    new.transposed().to_wide_csv(flipped)
    config = RecalibrationConfig(bank=tmp_path / "sim", responses=[flipped], wide=True, items_as_rows=True)
    assert _read_new_responses(config).sha256() == new.sha256()
    with pytest.raises(ValueError, match="items_as_rows must be true or false"):
        RecalibrationConfig(bank=tmp_path / "sim", responses=[flipped], items_as_rows="yes")


def test_merge_reports_conflicts_and_unions():
    old = ResponseData.from_arrays([[1, 0, -1], [0, 1, 1]], subject_ids=["m1", "m2"], item_ids=["a", "b", "c"])
    new = ResponseData.from_arrays([[1, 1], [0, 0]], subject_ids=["m2", "m3"], item_ids=["c", "d"])
    merged = merge_responses(old, new)
    assert merged.subject_ids == ("m1", "m2", "m3") and merged.item_ids == ("a", "b", "c", "d")
    np.testing.assert_array_equal(merged.correct, [[1, 0, -1, -1], [0, 1, 1, 1], [-1, -1, 0, 0]])
    clash = ResponseData.from_arrays([[0]], subject_ids=["m2"], item_ids=["c"])
    with pytest.raises(ValueError, match="subject 'm2', item 'c': the new responses disagree"):
        merge_responses(old, clash)
    assert merge_responses(old, clash, on_conflict="new").correct[1, 2] == 0


def test_merge_without_stored_responses_explains_replace(tmp_path, truth):
    theta = np.random.default_rng(1).standard_normal(100)
    data = _sample(truth, theta, "old", 2)
    write_item_bank(CBMMCalibrator(progress=False).fit(data).to_item_bank("sim"), tmp_path / "sim")
    config = RecalibrationConfig(bank=tmp_path / "sim", responses=[_write_new(tmp_path, data)])
    with pytest.raises(ValueError, match="does not keep its calibration responses.*replace"):
        recalibrate(config)


def test_diff_flags_added_removed_and_drifted_items(truth):
    from catengine import ItemBank

    old = ItemBank.from_params("2pl", ["x", "y", "z"], bank_id="d", a=[1.0, 1.0, 1.0], b=[0.0, 0.0, 0.0])
    new = ItemBank.from_params("2pl", ["y", "z", "w"], bank_id="d", a=[-0.8, 1.1, 1.0], b=[0.0, 2.0, 0.0])
    diff = diff_banks(old, new, drift_threshold=0.5)
    assert diff.items_added == ("w",) and diff.items_removed == ("x",)
    assert {d.item for d in diff.drifted_items} == {"y", "z"}
    assert next(d for d in diff.drifted_items if d.item == "y").sign_flip
    text = diff.format()
    assert "possible mis-key" in text and "items added:   1 (w)" in text


def test_cli_recalibrate_from_toml_then_diff_and_log(tmp_path, truth, capsys):
    _version_one(tmp_path, truth)
    new = _sample(truth, np.random.default_rng(9).standard_normal(80), "extra", 10)
    _write_new(tmp_path, new, "batch2.nc")
    (tmp_path / "recal.toml").write_text(
        '[recalibration]\nbank = "sim"\nresponses = ["batch2.nc"]\nlinking = "mean-sigma"\ndrift_threshold = 0.4\n'
        'interval_check = false\n'
    )
    assert calibration_main(["recalibrate", "--config", str(tmp_path / "recal.toml")]) == 0
    out = capsys.readouterr().out
    assert "sim_v2.nc (v2, parent v1); linked by mean-sigma" in out and "subjects added: 80" in out
    assert calibration_main(["recalibrate", "--config", str(tmp_path / "recal.toml")]) == 0
    assert "no new version" in capsys.readouterr().out
    assert calibration_main(["diff", str(tmp_path / "sim"), "1", "2"]) == 0
    assert "diff v1 -> v2" in capsys.readouterr().out
    assert calibration_main(["log", str(tmp_path / "sim")]) == 0
    log = capsys.readouterr().out.splitlines()
    assert len(log) == 3 and "mean-sigma" in log[2]


def test_config_rejects_unknown_keys(tmp_path):
    (tmp_path / "bad.toml").write_text('[recalibration]\nbank = "x"\nresponses = ["a.nc"]\nlinkage = "x"\n')
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['linkage'\]"):
        RecalibrationConfig.from_toml(tmp_path / "bad.toml")


def test_recalibrate_shows_progress_only_when_asked_or_on_a_terminal(tmp_path, truth, capsys):
    import io

    from catengine.console import progress_enabled

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    assert progress_enabled(None, Terminal()) and not progress_enabled(None, io.StringIO())
    assert progress_enabled(True, io.StringIO()) and not progress_enabled(False, Terminal())
    _version_one(tmp_path, truth)
    new = _sample(truth, np.random.default_rng(5).standard_normal(60), "extra", 6)
    batch = _write_new(tmp_path, new, "batch.nc")
    # piped (pytest captures stderr): no bar by default
    assert calibration_main(["recalibrate", "--bank", str(tmp_path / "sim"), "--responses", str(batch),
                             "--no-interval-check"]) == 0
    assert "recalibrate" not in capsys.readouterr().err
    # --progress: the stage bar (and the refit's own bar) on stderr
    new2 = _sample(truth, np.random.default_rng(7).standard_normal(60), "more", 8)
    batch2 = _write_new(tmp_path, new2, "batch2.nc")
    assert calibration_main(["recalibrate", "--bank", str(tmp_path / "sim"), "--responses", str(batch2), "--progress",
                             "--no-interval-check"]) == 0
    err = capsys.readouterr().err
    assert "recalibrate" in err and "stage" in err
