"""Item bank schema, round trips, versioning and error reporting."""

import os
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from bank_files import schema_error
from catengine import ItemBank, open_item_bank, write_item_bank
from catengine.errors import ItemBankSchemaError, ItemBankVersionExistsError
from catengine.itembank import list_versions


def lart_bank(n_items=6, **extra):
    rng = np.random.default_rng(1)
    return ItemBank.from_params(
        "lart",
        [f"q{k}" for k in range(n_items)],
        bank_id="demo",
        calibration_method="saem",
        calibration_settings={"max_iter": 100, "tol": 1e-4, "nested": {"burn_in": 5}},
        responses_sha256="ab" * 32,
        n_subjects=40,
        scale={"theta": "unit variance by model"},
        rho=-0.7,
        cot_offset=1.0,
        a=rng.uniform(0.5, 1, n_items),
        b=rng.normal(0, 0.5, n_items),
        omega=rng.normal(6, 1, n_items),
        phi=rng.uniform(0.5, 1.5, n_items),
        lam=rng.uniform(0.5, 2, n_items),
        item_metadata={"benchmark": ["math"] * (n_items - 1) + ["amc"]},
        item_vars={"perfect_item": np.zeros(n_items, dtype=np.int8)},
        subjects=xr.Dataset(
            {"theta": ("subject", [0.1, -0.3]), "theta_sd": ("subject", [0.2, 0.25])},
            coords={"subject": ["m1", "m2"]},
        ),
        calibration=xr.Dataset({"loss_trace": ("iteration", [3.0, 2.0, 1.5])}, attrs={"n_iter": 3, "converged": 1}),
        **extra,
    )


def four_pl_bank():
    return ItemBank.from_params(
        "4pl", ["i1", "i2", "i3"], bank_id="psn", a=[1.0, 2.0, 0.5], b=[0.0, -1.0, 1.0],
        c=[0.0, 0.1, 0.2], d=[1.0, 0.95, 0.9], b_sd=[0.1, 0.2, 0.3],
    )


def test_round_trip_is_identical(tmp_path):
    bank = lart_bank()
    path = write_item_bank(bank, tmp_path / "demo")
    assert path.name == "demo_v1.nc"
    loaded = open_item_bank(tmp_path / "demo")
    for group in ("items", "subjects", "calibration"):
        xr.testing.assert_identical(getattr(loaded, group), getattr(bank, group))
    stamped = {"bank_version", "parent_version", "written_at", "content_sha256"}  # set by write_item_bank
    unstamped = lambda attrs: {k: v for k, v in attrs.items() if k not in stamped}  # noqa: E731
    assert unstamped(loaded.attrs) == unstamped(bank.attrs)
    assert loaded.version == 1 and loaded.parent_version == 0
    assert loaded.calibration_settings == {"max_iter": 100, "tol": 1e-4, "nested": {"burn_in": 5}}
    np.testing.assert_array_equal(loaded.params.phi, bank.params.phi)
    assert loaded.params.rho == pytest.approx(-0.7)
    assert list(loaded.item_metadata("benchmark")) == ["math"] * 5 + ["amc"]


def test_four_pl_round_trip_and_difficulty(tmp_path):
    bank = four_pl_bank()
    loaded = open_item_bank(write_item_bank(bank, tmp_path))
    xr.testing.assert_identical(loaded.items, bank.items)
    # difficulty = -b/a is derived for display only
    np.testing.assert_allclose(loaded.difficulty(), [0.0, 0.5, -2.0])


def test_versions_increase_and_record_parent(tmp_path):
    bank = lart_bank()
    first = write_item_bank(bank, tmp_path)
    second = write_item_bank(open_item_bank(first), tmp_path)
    third = write_item_bank(bank, tmp_path)  # a fresh fit: a new lineage root, not a child of v2
    fourth = write_item_bank(bank, tmp_path, parent=3)  # a recalibration says which version it links to
    assert [p.name for p in (first, second, third, fourth)] == ["demo_v1.nc", "demo_v2.nc", "demo_v3.nc", "demo_v4.nc"]
    assert open_item_bank(tmp_path, version=2).parent_version == 1
    assert open_item_bank(tmp_path, version=3).parent_version == 0
    assert open_item_bank(tmp_path).parent_version == 3 and open_item_bank(tmp_path).version == 4
    with pytest.raises(ValueError, match="parent version 9 is not stored"):
        write_item_bank(bank, tmp_path, parent=9, version=10)
    assert sorted(list_versions(tmp_path)) == [1, 2, 3, 4]


def test_existing_version_is_never_overwritten(tmp_path):
    bank = lart_bank()
    path = write_item_bank(bank, tmp_path)
    before = path.read_bytes()
    with pytest.raises(ItemBankVersionExistsError, match="never overwritten"):
        write_item_bank(four_pl_bank().replace_attrs(bank_id="demo"), tmp_path, version=1)
    assert path.read_bytes() == before
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")], "temporary file left behind"


def test_failed_write_leaves_nothing_and_keeps_old_versions(tmp_path, monkeypatch):
    bank = lart_bank()
    path = write_item_bank(bank, tmp_path)

    def boom(*args, **kwargs):
        raise OSError("disk full (simulated)")

    monkeypatch.setattr(xr.DataTree, "to_netcdf", boom)
    with pytest.raises(OSError, match="disk full"):
        write_item_bank(bank, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]
    monkeypatch.undo()
    assert open_item_bank(tmp_path).version == 1


def test_refuses_to_mix_banks_in_one_directory(tmp_path):
    write_item_bank(lart_bank(), tmp_path)
    with pytest.raises(ValueError, match="holds bank 'demo'"):
        write_item_bank(four_pl_bank(), tmp_path)


def test_truncated_file_is_a_schema_error(tmp_path):
    path = write_item_bank(lart_bank(), tmp_path)
    data = path.read_bytes()
    broken = tmp_path / "broken.nc"
    broken.write_bytes(data[: len(data) // 2])
    with pytest.raises(ItemBankSchemaError, match="cannot be read as a netCDF4 item bank") as info:
        open_item_bank(broken)
    assert str(broken) in str(info.value)


def test_random_binary_file_is_a_schema_error(tmp_path):
    junk = tmp_path / "junk.nc"
    junk.write_bytes(np.random.default_rng(0).bytes(4096))
    with pytest.raises(ItemBankSchemaError, match="cannot be read"):
        open_item_bank(junk)


def _schema_error(tmp_path, edit):
    return schema_error(lart_bank().to_datatree(), edit, tmp_path / "edited.nc")


def test_deleted_variable_is_named(tmp_path):
    def drop_phi(tree):
        tree["items"] = tree["items"].to_dataset().drop_vars("phi")

    assert "missing variable '/items/phi'" in str(_schema_error(tmp_path, drop_phi))


def test_every_problem_is_listed_at_once(tmp_path):
    def break_many(tree):
        ds = tree["items"].to_dataset().drop_vars("omega")
        b = ds["b"].values.copy()
        b[2] = np.nan
        ds["b"] = ("item", b)
        ds["a"] = ds["a"].expand_dims(extra=2)
        tree["items"] = ds
        tree.attrs["schema_version"] = 99

    error = _schema_error(tmp_path, break_many)
    message = str(error)
    assert "unknown schema_version 99" in message
    assert "missing variable '/items/omega'" in message
    assert "'/items/b' is NaN or infinite for 1 item(s): 'q2'" in message
    assert "'/items/a' has dims" in message
    assert len(error.problems) == 4


def test_newer_schema_says_how_to_upgrade(tmp_path):
    def from_the_future(tree):
        tree.attrs["schema_version"] = 99
        tree.attrs["library_version"] = "9.9.0"

    message = str(_schema_error(tmp_path, from_the_future))
    assert "unknown schema_version 99" in message and "written by irt-llm-eval 9.9.0" in message
    assert "upgrade to irt-llm-eval >= 9.9.0" in message and "pip install -U irt-llm-eval" in message


def test_file_name_must_match_contents(tmp_path):
    path = write_item_bank(lart_bank(), tmp_path)
    renamed = tmp_path / "demo_v7.nc"
    os.rename(path, renamed)
    with pytest.raises(ItemBankSchemaError, match="file name says version 7"):
        open_item_bank(tmp_path)


def test_from_params_rejects_bad_values():
    with pytest.raises(ValueError, match="requires item parameter 'phi'"):
        ItemBank.from_params("lart", ["x"], bank_id="x", a=[1.0], b=[0.0], omega=[1.0], lam=[1.0])
    with pytest.raises(ValueError, match="not finite at item index 1"):
        ItemBank.from_params("2pl", ["x", "y"], bank_id="x", a=[1.0, np.nan], b=[0.0, 0.0])
    with pytest.raises(ValueError, match="c < d"):
        ItemBank.from_params("4pl", ["x"], bank_id="x", a=[1.0], b=[0.0], c=[0.5], d=[0.4])
    with pytest.raises(ValueError, match="bank_id"):
        ItemBank.from_params("2pl", ["x"], bank_id="../evil", a=[1.0], b=[0.0])
    with pytest.raises(ValueError, match="2 item ids given for 1 items"):
        ItemBank.from_params("2pl", ["x", "y"], bank_id="x", a=[1.0], b=[0.0])
    with pytest.raises(ItemBankSchemaError, match="duplicate item ids: 'x'"):
        ItemBank.from_params("2pl", ["x", "x"], bank_id="x", a=[1.0, 1.0], b=[0.0, 0.0])


def test_bank_is_immutable():
    bank = lart_bank()
    with pytest.raises(ValueError):
        bank.params.a[0] = 5.0
    items = bank.items
    items["a"][0] = 5.0  # a copy: the bank does not change
    assert bank.params.a[0] != 5.0
    with pytest.raises(ValueError):
        bank.item_metadata("benchmark")[0] = "x"


def test_open_version_selection_errors(tmp_path):
    write_item_bank(lart_bank(), tmp_path)
    with pytest.raises(FileNotFoundError, match=r"no version 4; available: \[1\]"):
        open_item_bank(tmp_path, version=4)
    with pytest.raises(FileNotFoundError, match="no item bank"):
        open_item_bank(tmp_path / "nope")


def test_no_pickle_in_packages():
    root = Path(__file__).resolve().parents[1]
    for package in ("catengine", "calibration"):
        for source in (root / package).rglob("*.py"):
            text = source.read_text()
            assert "import pickle" not in text and "import dill" not in text, source


def test_bank_can_keep_its_calibration_responses(tmp_path):
    from calibration import ResponseData

    data = ResponseData.from_arrays(
        [[1, 0, -1, 1, 0, 1], [0, 0, 1, 1, 1, -1]],
        [[10.0, np.nan, 3.0, 0.0, 7.0, 2.0], [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]],
        item_ids=[f"q{k}" for k in range(6)],
    )
    bank = lart_bank().with_group("responses", data.to_dataset())
    loaded = open_item_bank(write_item_bank(bank, tmp_path))
    back = ResponseData.from_dataset(loaded.responses)
    assert back.sha256() == data.sha256()
    with pytest.raises(ValueError, match="not an optional group"):
        bank.with_group("items", data.to_dataset())


def test_effective_cot_offset_keeps_zero():
    """A LaRT bank calibrated with offset 0 (log T exactly) is scored and simulated with 0, not 1."""
    from catengine.session.simulate import simulate_answer

    kw = dict(a=[1.0], b=[0.0], omega=[5.0], phi=[1.0], lam=[0.5], rho=-0.5)
    zero = ItemBank.from_params("lart", ["x"], bank_id="z", cot_offset=0.0, **kw)
    default = ItemBank.from_params("lart", ["x"], bank_id="d", **kw)
    assert zero.effective_cot_offset == 0.0 and default.effective_cot_offset == 1.0
    assert ItemBank.from_params("2pl", ["x"], bank_id="t", a=[1.0], b=[0.0]).effective_cot_offset == 1.0
    from catengine.session import CATSession

    assert CATSession(zero).cot_offset == 0.0
    t0 = simulate_answer(zero.params, 0, 0.0, 0.0, np.random.default_rng(1), zero.effective_cot_offset)[1]
    t1 = simulate_answer(default.params, 0, 0.0, 0.0, np.random.default_rng(1), default.effective_cot_offset)[1]
    assert t1 == pytest.approx(t0 - 1.0)  # exp(x) - offset with the same draw
