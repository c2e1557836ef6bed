"""calibration fit psn: the command line writes a PSN bank."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from calibration.methods.psn import p_ahead
from psn_cases import _sim

# ============================================================================ CLI


def test_cli_fit_writes_bank(tmp_path, capsys):
    from calibration.cli import main
    from calibration.io import load_responses
    from catengine.itembank import open_item_bank

    data, _ = _sim(N=8, J=30, seed=2)
    csv_path = tmp_path / "resp.csv"
    np.savetxt(csv_path, data.correct, fmt="%d", delimiter=",")  # headerless matrix, as percent_0.7.csv
    assert load_responses(csv_path).shape == data.shape
    assert main(["fit", "--method", "psn", "--responses", str(csv_path), "--bank-id", "cli_psn", "--out",
                 str(tmp_path / "banks"), "--epochs", "2", "--hidden-dim", "8", "--embedding-dim", "8",
                 "--no-progress", "--seed", "5"]) == 0
    path = Path(capsys.readouterr().out.strip())
    assert path.parent == tmp_path / "banks" / "cli_psn"
    bank = open_item_bank(path)
    assert bank.bank_id == "cli_psn" and bank.n_items == 30 and "b_sd" in bank.items
    assert bank.subjects["p_ahead"].shape == (8, 8)
    assert main(["fit", "--method", "psn", "--responses", str(csv_path), "--bank-id", "cli_psn_mean", "--out",
                 str(tmp_path / "banks"), "--epochs", "1", "--hidden-dim", "4", "--embedding-dim", "4",
                 "--no-progress", "--temperature", "mean-loss"]) == 0
    bank = open_item_bank(Path(capsys.readouterr().out.strip()))
    assert bank.posterior.attrs["temperature"] == float((data.correct >= 0).sum())
    with pytest.raises(SystemExit):
        main(["fit", "--method", "psn", "--responses", str(csv_path), "--bank-id", "x", "--temperature", "warm"])
    assert "expected a positive number, 'split-half' or 'mean-loss', got 'warm'" in capsys.readouterr().err


def test_calibration_cli_entry_point(tmp_path, capsys):
    """``calibration fit --method psn ...`` through the package's dispatcher; path on stdout."""
    from calibration.cli import main

    data, _ = _sim(N=6, J=20, seed=3)
    nc = tmp_path / "resp.nc"
    data.to_netcdf(nc)
    rc = main(["fit", "--method", "psn", "--responses", str(nc), "--bank-id", "psn_cli", "--out", str(tmp_path),
               "--epochs", "1", "--hidden-dim", "4", "--embedding-dim", "4", "--no-progress", "--tune-prior-precision"])
    assert rc == 0
    out = capsys.readouterr()
    path = Path(out.out.strip())
    assert path.exists() and path.parent.name == "psn_cli" and "PSN-IRT" in out.err
    rc = main(["fit", "--method", "psn", "--responses", str(nc), "--bank-id", "psn_cli_sh", "--out", str(tmp_path),
               "--epochs", "1", "--hidden-dim", "4", "--embedding-dim", "4", "--no-progress", "--temperature", "split-half"])
    assert rc == 0 and "split-half check at T = 1: 6 subjects: RMS z" in capsys.readouterr().err
    rc = main(["fit", "--method", "psn", "--responses", str(tmp_path / "missing.csv"), "--bank-id", "x", "--out", str(tmp_path)])
    assert rc == 2 and "does not exist" in capsys.readouterr().err
