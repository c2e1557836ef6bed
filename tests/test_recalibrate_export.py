"""Recalibration repeats a bank's export options (PSN ``--native-scale`` / ``--no-features``)."""

import numpy as np

from calibration.cli import main as calibration_main
from calibration.recalibration import RecalibrationConfig, recalibrate
from calibration.simulate import draw_item_params, simulate_responses
from catengine import open_item_bank

NATIVE = "native PSN-IRT network scale"
PSN_OPTIONS = ["--epochs", "10", "--batch-size", "64", "--hidden-dim", "8", "--embedding-dim", "8", "--no-progress",
               "--seed", "2"]


def _responses(tmp_path, name, prefix, n, seed, params):
    theta = np.random.default_rng(seed).standard_normal(n)
    data = simulate_responses(params, theta, rng=seed + 1, subject_ids=[f"{prefix}{k}" for k in range(n)],
                              item_ids=[f"item{j}" for j in range(params.n_items)])
    return data.to_netcdf(tmp_path / name)


def _fit_psn(tmp_path, capsys, *flags):
    params = draw_item_params("2pl", 30, rng=7)
    old = _responses(tmp_path, "old.nc", "old", 30, 1, params)
    assert calibration_main(["fit", "psn", "--responses", str(old), "--bank-id", "psn", "--out", str(tmp_path / "banks"),
                             *PSN_OPTIONS, *flags]) == 0
    v1 = open_item_bank(capsys.readouterr().out.strip())
    new = _responses(tmp_path, "new.nc", "new", 10, 3, params)
    result = recalibrate(RecalibrationConfig(bank=tmp_path / "banks" / "psn", responses=[new]))
    assert result.status == "written" and result.version == 2
    return v1, open_item_bank(result.path)


def test_psn_bank_on_the_native_scale_without_features_recalibrates_the_same_way(tmp_path, capsys):
    v1, v2 = _fit_psn(tmp_path, capsys, "--native-scale", "--no-features")
    for bank in (v1, v2):
        assert bank.scale["theta"] == NATIVE
        assert bank.scale["location"] == 0.0 and bank.scale["scale"] == 1.0  # nothing was standardised
        assert "b_features" not in bank.posterior and bank.posterior.attrs["features_included"] == 0
        assert bank.calibration_settings["standardize"] is False
        assert bank.calibration_settings["include_features"] is False
    assert v2.calibration_settings["max_epochs"] == 10 and v2.calibration_settings["batch_size"] == 64


def test_psn_bank_with_default_export_keeps_it(tmp_path, capsys):
    v1, v2 = _fit_psn(tmp_path, capsys)
    for bank in (v1, v2):
        assert bank.scale["theta"] != NATIVE and "b_features" in bank.posterior
        assert bank.calibration_settings["standardize"] is True
