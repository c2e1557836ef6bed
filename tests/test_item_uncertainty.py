"""Schema v2: item-parameter uncertainty in banks (SDs, covariances, draws); v1 banks still open and run."""

from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from bank_files import schema_error
from catengine import CATSession, ItemBank, ItemUncertainty, open_item_bank, write_item_bank
from catengine.errors import ItemBankSchemaError
from catengine.itembank.schema import SCHEMA_VERSION

DEMO_V1 = Path(__file__).resolve().parents[1] / "item_banks" / "demo_math500_lart"


def two_pl_bank(**extra):
    rng = np.random.default_rng(3)
    J = 5
    a_sd, b_sd = rng.uniform(0.1, 0.3, J), rng.uniform(0.05, 0.2, J)
    kwargs = dict(a_sd=a_sd, b_sd=b_sd, ab_cov=0.5 * a_sd * b_sd * rng.uniform(-1, 1, J),
                  a_draws=rng.uniform(0.5, 2, (7, J)), b_draws=rng.normal(0, 1, (7, J)))
    kwargs.update(extra)
    return ItemBank.from_params("2pl", [f"i{k}" for k in range(J)], bank_id="unc", a=rng.uniform(0.5, 2, J),
                                b=rng.normal(0, 1, J), uncertainty_method="test values", **kwargs), kwargs


def test_uncertainty_round_trips_through_disk(tmp_path):
    bank, given = two_pl_bank()
    assert bank.attrs["schema_version"] == SCHEMA_VERSION >= 2
    loaded = open_item_bank(write_item_bank(bank, tmp_path))
    unc = loaded.item_uncertainty
    assert isinstance(unc, ItemUncertainty) and unc.method == "test values" and unc.n_draws == 7
    for name, value in given.items():
        np.testing.assert_array_equal(getattr(unc, name), value)
    cov = unc.ab_covariance()
    np.testing.assert_allclose(cov[:, 0, 0], given["a_sd"] ** 2)
    np.testing.assert_allclose(cov[:, 0, 1], given["ab_cov"])
    assert loaded.posterior["a_draws"].dims == ("draw", "item")
    with pytest.raises(ValueError):
        unc.a_sd[0] = 1.0  # read-only
    sub = unc.subset([1, 3])
    np.testing.assert_array_equal(sub.b_draws, given["b_draws"][:, [1, 3]])
    assert sub.n_items == 2


def test_lart_uncertainty_and_bank_without_any():
    J = 3
    base = dict(a=[1.0, 0.8, 1.2], b=[0.0, 0.5, -0.5], omega=[5.0, 6.0, 7.0], phi=[1.0, 0.9, 1.1], lam=[1.0, 1.2, 0.8])
    bank = ItemBank.from_params("lart", ["x", "y", "z"], bank_id="l", rho=0.2, **base,
                                omega_sd=[0.1] * J, phi_sd=[0.2] * J, omega_phi_cov=[-0.01] * J)
    unc = bank.item_uncertainty
    assert unc.a_sd is None and unc.omega_phi_cov[0] == -0.01 and unc.n_draws == 0
    assert ItemBank.from_params("lart", ["x", "y", "z"], bank_id="l", **base).item_uncertainty is None
    with pytest.raises(ItemBankSchemaError, match="belongs to lart banks only"):
        ItemBank.from_params("2pl", ["x"], bank_id="t", a=[1.0], b=[0.0], omega_sd=[0.1])


@pytest.mark.parametrize(
    "extra, message",
    [
        (dict(a_sd=[-0.1, 0.1, 0.1, 0.1, 0.1]), "a_sd .an SD. must be >= 0"),
        (dict(ab_cov=[1.0] * 5), "implies .correlation. > 1"),
        (dict(a_draws=np.ones((2, 4))), "a_draws must have shape"),
        (dict(b_draws=np.full((7, 5), np.nan)), "b_draws is not finite"),
        (dict(a_draws=np.ones((3, 5))), "same number of draws"),
    ],
)
def test_from_params_rejects_bad_uncertainty(extra, message):
    with pytest.raises(ValueError, match=message):
        two_pl_bank(**extra)


def _schema_error(tmp_path, mutate):
    bank, _ = two_pl_bank()
    return schema_error(bank.to_datatree(), mutate, tmp_path / "unc_v1.nc")


def test_schema_names_every_bad_uncertainty_variable(tmp_path):
    def break_it(tree):
        items = tree["items"].to_dataset()
        items["b_sd"] = ("item", -items["b_sd"].values)
        a_sd = items["a_sd"].values.copy()
        a_sd[2] = np.inf
        items["a_sd"] = ("item", a_sd)
        tree["items"] = items
        post = tree["posterior"].to_dataset()
        post["b_draws"] = post["b_draws"].transpose("item", "draw")
        tree["posterior"] = post

    text = str(_schema_error(tmp_path, break_it))
    assert "'/items/b_sd' (an SD) must be >= 0; item 'i0'" in text
    assert "'/items/a_sd' is NaN or infinite for 1 item(s): 'i2'" in text
    assert "'/posterior/b_draws' has dims ('item', 'draw')" in text


def test_schema_rejects_a_correlation_above_one(tmp_path):
    def break_it(tree):
        items = tree["items"].to_dataset()
        items["ab_cov"] = ("item", 2.0 * items["a_sd"].values * items["b_sd"].values)
        tree["items"] = items

    assert "'/items/ab_cov' implies |correlation| > 1 for 5 item(s), first 'i0'" in str(_schema_error(tmp_path, break_it))


@pytest.mark.skipif(not DEMO_V1.is_dir(), reason="demo bank not in this checkout")
def test_v1_bank_opens_and_runs():
    from catengine.errors import BankChecksumWarning

    with pytest.warns(BankChecksumWarning):
        bank = open_item_bank(DEMO_V1, version=1)
    assert bank.attrs["schema_version"] == 1 and bank.item_uncertainty is None
    session = CATSession(bank)
    for _ in range(3):
        item = session.next_item()
        session.record(item, 1, 300.0)
    assert np.isfinite(session.estimate.theta) and session.n_items == 3
