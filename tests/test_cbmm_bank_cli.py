"""cBMM item banks and calibration fit cbmm."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from calibration.methods.cbmm.calibrator import CBMMCalibrator
from calibration.data import ResponseData
from cbmm_cases import _sim

# ------------------------------------------------------------------------------ item bank + CLI
def test_to_item_bank_records_provenance(tmp_path):
    pytest.importorskip("catengine.itembank")
    from catengine.itembank import open_item_bank, write_item_bank

    data, _, _ = _sim(150, 40, seed=2)
    c = data.correct.copy()
    c[:, 3] = 1
    data = ResponseData.from_arrays(c, subject_ids=[f"llm{i}" for i in range(150)], item_ids=[f"q{j}" for j in range(40)])
    cal = CBMMCalibrator(sigma=1.5, rng=7, progress=False).fit(data)
    bank = cal.to_item_bank("cbmm_test")
    assert bank.response_model == "2pl" and bank.attrs["calibration_method"] == "cbmm"
    settings = bank.calibration_settings
    for key, value in cal.get_params().items():
        assert settings[key] == value
    assert bank.attrs["responses_sha256"] == data.sha256()
    assert bank.attrs["n_subjects"] == 150
    scale = bank.scale
    assert scale["theta_mean"] == cal.scale_["theta_mean"] and scale["theta_sd"] == cal.scale_["theta_sd"]
    assert scale["sigma"] == 1.5
    np.testing.assert_allclose(bank.params.a, cal.a_)
    np.testing.assert_allclose(bank.params.b, cal.b_)
    assert int(bank.items["perfect"].values[3]) == 1 and int(bank.items["perfect"].values.sum()) == 1
    assert bank.subjects["theta"].shape == (150,)
    assert bank.calibration["loss_trace"].size == cal.loss_trace_.size
    assert bank.calibration.attrs["converged"] == 1
    path = write_item_bank(bank, tmp_path / "cbmm_test")
    back = open_item_bank(path)
    np.testing.assert_allclose(back.params.a, cal.a_)
    assert back.calibration_settings == settings


def test_cli_fit_writes_a_bank(tmp_path, capsys):
    from calibration import ResponseData
    from calibration.cli import main
    from catengine import open_item_bank

    data, _, _ = _sim(80, 30, seed=5, missing="mcar", rate=0.2)
    wide = tmp_path / "acc.csv"
    data.to_wide_csv(wide)
    out = tmp_path / "item_banks"
    assert main(["fit", "--method", "cbmm", "--responses", str(wide), "--wide", "--bank-id", "sim80",
                 "--out", str(out), "--tol", "1e-5", "--no-progress"]) == 0
    printed = capsys.readouterr().out.strip().splitlines()[-1]
    assert Path(printed).exists() and Path(printed).parent == out / "sim80" and Path(printed).name == "sim80_v1.nc"
    stored = ResponseData.from_dataset(open_item_bank(printed).responses)  # kept for recalibration
    assert stored.sha256() == ResponseData.from_wide_csv(wide).sha256()
    # a long-table file, second version
    long_csv = tmp_path / "long.csv"
    rows = data.to_long(drop_missing=True)
    long_csv.write_text("subject,item,correct\n" + "".join(f"{r['subject']},{r['item']},{r['correct']}\n" for r in rows))
    assert main(["fit", "--method", "cbmm", "--responses", str(long_csv), "--bank-id", "sim80", "--out", str(out),
                 "--no-progress", "--no-keep-responses"]) == 0
    assert open_item_bank(out / "sim80" / "sim80_v2.nc").responses is None
    # bad input: exit code 2 and a message naming the file, nothing written
    assert main(["fit", "--method", "cbmm", "--responses", str(tmp_path / "nope.csv"), "--bank-id", "sim80",
                 "--out", str(out)]) == 2
    assert "nope.csv" in capsys.readouterr().err
    assert sorted(p.name for p in (out / "sim80").iterdir()) == ["sim80_v1.nc", "sim80_v2.nc"]
