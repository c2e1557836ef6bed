"""Regression tests of issue 18 (item banks): bank files cannot hang, lie or escape.

4. ids are validated as names wherever a bank is built or opened (no path traversal);
5. a damaged file that hangs the netCDF library is refused within a deadline;
6. every failure of open_item_bank is an ItemBankSchemaError naming the file;
7. a content checksum catches silent parameter damage;
8. absurd parameters / attributes are refused (documented plausible ranges);
9. stale temp files of killed writers are removed; every write is atomic.
"""

import os
import threading
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

import naive_engine as naive
from catengine import ItemBank, open_item_bank, write_item_bank
from catengine.errors import ItemBankSchemaError
from catengine.itembank import guard
from catengine.itembank.schema import PLAUSIBLE_RANGES, content_sha256

TESTS = Path(__file__).resolve().parent
REGRESSIONS = TESTS / "fixtures" / "regressions"


def _tree(bank=None):
    return (bank or naive.make_bank("2pl", 12, seed=1)).to_datatree()


def _write_raw(tree, path):
    """Write a tree as netCDF without the library's checks (a file received from elsewhere)."""
    encoding = {node.path: {v: {"_FillValue": None} for v in node.ds.variables} for node in tree.subtree if node.ds.variables}
    tree.to_netcdf(path, engine="netcdf4", encoding=encoding)
    return path


# ----------------------------------------------------------------------------- 4. names
@pytest.mark.parametrize("bank_id", ["../../escaped", "/abs/path", "", "a b", ".hidden", "..", "tab\there", "x\ny"])
def test_a_received_file_with_an_unsafe_bank_id_is_refused(tmp_path, bank_id):
    tree = _tree()
    tree.attrs["bank_id"] = bank_id
    path = _write_raw(tree, tmp_path / "received.nc")
    with pytest.raises(ItemBankSchemaError, match="bank_id"):
        open_item_bank(path)
    with pytest.raises(ItemBankSchemaError, match="bank_id"):
        ItemBank(tree)
    with pytest.raises(ValueError, match="bank_id"):
        ItemBank.from_params("2pl", ["q1"], bank_id=bank_id, a=[1.0], b=[0.0])
    assert not any(tmp_path.parent.glob("escaped*")) and not list(tmp_path.rglob("*escaped*"))


@pytest.mark.parametrize("bad", ["", "q 1\n", " lead", "trail ", "a\x00b"])
def test_empty_or_control_character_item_ids_are_refused(bad):
    with pytest.raises(ValueError, match="item id"):
        ItemBank.from_params("2pl", ["q0", bad], bank_id="b", a=[1.0, 1.0], b=[0.0, 0.0])


def test_item_ids_with_slashes_stay_valid():
    bank = ItemBank.from_params("2pl", ["gsm8k/1", "math 500/2"], bank_id="b", a=[1.0, 1.0], b=[0.0, 0.0])
    assert bank.item_ids == ("gsm8k/1", "math 500/2")


# ----------------------------------------------------------------------------- 5. hangs
@pytest.mark.parametrize("name", ["bank_hangs_netcdf4_a.nc", "bank_hangs_netcdf4_b.nc"])
def test_a_file_that_hangs_the_netcdf_library_is_refused_in_time(monkeypatch, name):
    """Two bit-damaged files on which netCDF4.Dataset() loops forever (found by flipping bits of a
    small bank; kept as regression files). The guarded open gives up after the deadline."""
    monkeypatch.setattr(guard, "PROBE_TIMEOUT", 3.0)
    t0 = time.monotonic()
    with pytest.raises(ItemBankSchemaError, match=rf"(?s){name}.*did not finish"):
        open_item_bank(REGRESSIONS / name)
    assert time.monotonic() - t0 < 60  # a bound, not a timing claim: without the guard it never returns


def test_the_probe_runs_once_per_file_and_not_for_files_matching_their_stamp(tmp_path, monkeypatch):
    path = write_item_bank(naive.make_bank("2pl", 12, seed=1), tmp_path / "b")
    if os.getxattr(path, guard.XATTR) != guard.file_sha256(path).encode():  # pragma: no cover
        pytest.fail("write_item_bank did not stamp the file")
    calls = []
    real = guard._choose_probe
    monkeypatch.setattr(guard, "_choose_probe", lambda: calls.append(1) or real())
    open_item_bank(path)
    assert calls == []  # intact: byte-identical to what the writer wrote
    copy = tmp_path / "received.nc"
    copy.write_bytes(path.read_bytes())  # a copy has no stamp: probed once, then remembered
    open_item_bank(copy)
    open_item_bank(copy)
    assert len(calls) == 1


@pytest.mark.parametrize("probe", ["_probe_fork", "_probe_subprocess"])
def test_both_probes_read_a_good_file_and_stop_a_hanging_one(tmp_path, probe):
    good = write_item_bank(naive.make_bank("2pl", 12, seed=1), tmp_path / "b")
    assert getattr(guard, probe)(str(good), 10.0) is None
    problem = getattr(guard, probe)(str(REGRESSIONS / "bank_hangs_netcdf4_a.nc"), 2.0)
    assert problem is not None and "did not finish within 2 s" in problem


def test_the_fork_probe_is_used_only_in_a_single_threaded_process(monkeypatch):
    """A fork while another thread holds a lock can deadlock the child: threads mean a fresh subprocess."""
    monkeypatch.setattr(guard, "thread_count", lambda: 1)
    assert guard._choose_probe() is guard._probe_fork
    monkeypatch.setattr(guard, "thread_count", lambda: 3)
    assert guard._choose_probe() is guard._probe_subprocess
    monkeypatch.undo()
    started = threading.Event()
    worker = threading.Thread(target=started.wait)
    worker.start()
    try:
        assert guard.thread_count() >= 2 and guard._choose_probe() is guard._probe_subprocess
    finally:
        started.set()
        worker.join()


def test_a_wrong_stamp_does_not_skip_the_probe(tmp_path, monkeypatch):
    monkeypatch.setattr(guard, "PROBE_TIMEOUT", 3.0)
    damaged = tmp_path / "bank_hangs.nc"
    damaged.write_bytes((REGRESSIONS / "bank_hangs_netcdf4_a.nc").read_bytes())
    os.setxattr(damaged, guard.XATTR, b"0" * 64)  # a stamp that the damaged bytes do not match
    with pytest.raises(ItemBankSchemaError, match="did not finish"):
        open_item_bank(damaged)


# ----------------------------------------------------------------------------- 6. foreign exceptions
@pytest.mark.parametrize("name", ["bank_foreign_attributeerror_a.nc", "bank_foreign_attributeerror_b.nc"])
def test_damaged_attributes_give_a_schema_error_naming_the_file(name):
    """Byte-damaged files on which the old open raised `AttributeError: NetCDF: Can't open HDF5 attribute`."""
    with pytest.raises(ItemBankSchemaError, match=name):
        open_item_bank(REGRESSIONS / name)


@pytest.mark.parametrize("attr", ["schema", "response_model", "bank_id", "calibration_settings", "cot_offset"])
def test_array_valued_attributes_are_schema_errors(tmp_path, attr):
    tree = _tree(naive.make_bank("lart", 12, seed=2))
    tree.attrs[attr] = np.array([1, 2])
    with pytest.raises(ItemBankSchemaError, match=attr):
        ItemBank(tree)
    with pytest.raises(ItemBankSchemaError, match="received.nc"):
        open_item_bank(_write_raw(tree, tmp_path / "received.nc"))


# ----------------------------------------------------------------------------- 7. checksum
@pytest.mark.parametrize("name", ["bank_silently_changed_a.nc", "bank_silently_changed_b.nc"])
def test_silent_parameter_damage_is_caught_by_the_checksum(name):
    """One damaged byte changed a parameter of these files; the old open accepted them."""
    reference = open_item_bank(REGRESSIONS / "bank_intact_reference.nc")
    tree = xr.open_datatree(REGRESSIONS / name, engine="netcdf4", mask_and_scale=False).load()
    damaged = tree["items"].to_dataset()
    assert any(not np.array_equal(damaged[v].values, reference.items[v].values) for v in ("a", "b", "item", "rho"))
    with pytest.raises(ItemBankSchemaError, match="content_sha256"):
        open_item_bank(REGRESSIONS / name)


def test_the_checksum_covers_every_items_variable_and_old_banks_still_open(tmp_path):
    bank = naive.make_bank("lart", 12, seed=2, b_sd=True)
    bank = ItemBank.from_params("lart", bank.item_ids, bank_id="x", rho=-0.5, cot_offset=1.0,
                                item_vars={"extra_sd": np.full(12, 0.2), "flag": np.arange(12) % 2 == 0},
                                **{n: getattr(bank.params, n) for n in bank.params.parameter_names})
    path = write_item_bank(bank, tmp_path / "x")
    stored = open_item_bank(path)
    assert stored.attrs["content_sha256"] == content_sha256(stored.to_datatree())
    base = content_sha256(stored.to_datatree())
    for name in ("a", "lam", "extra_sd", "flag", "item", "rho"):
        ds = stored.items
        if name == "item":
            ds = ds.assign_coords(item=np.array(["changed", *stored.item_ids[1:]], dtype=object))
        else:
            values = ds[name].values.copy()
            values.flat[0] = values.flat[0] + 1
            ds[name] = (ds[name].dims, values)
        tree = stored.to_datatree()
        tree["items"] = xr.DataTree(ds)
        assert content_sha256(tree) != base, name
    tree = stored.to_datatree()
    tree.attrs["cot_offset"] = 2.0
    assert content_sha256(tree) != base
    # a v1 file without the attribute (the shipped demo bank's first version) still opens, with a warning
    from catengine.errors import BankChecksumWarning

    with pytest.warns(BankChecksumWarning):
        demo = open_item_bank(TESTS.parent / "item_banks" / "demo_math500_lart", version=1)
    assert "content_sha256" not in demo.attrs


# ----------------------------------------------------------------------------- 8. ranges and types
@pytest.mark.parametrize("model, name, value", [
    ("4pl", "a", 1e300), ("2pl", "a", -1e300), ("lart", "a", 1e300), ("2pl", "b", 1e6),
    ("lart", "lam", 5e-324), ("lart", "lam", 1e9), ("lart", "omega", 1e4), ("lart", "phi", -1e4),
])
def test_absurd_parameters_are_refused(model, name, value):
    bank = naive.make_bank(model, 12, seed=4)
    arrays = {n: np.array(getattr(bank.params, n)) for n in bank.params.parameter_names}
    arrays[name][3] = value
    extra = dict(rho=-0.6, cot_offset=1.0) if model == "lart" else {}
    with pytest.raises(ValueError, match=rf"'/items/{name}' is outside its plausible range.*'q0003'"):
        ItemBank.from_params(model, bank.item_ids, bank_id="x", **extra, **arrays)


def test_the_ranges_admit_every_shipped_bank():
    demo = open_item_bank(TESTS.parent / "item_banks" / "demo_math500_lart")
    for name in demo.params.parameter_names:
        low, high = PLAUSIBLE_RANGES[name]
        values = getattr(demo.params, name)
        assert low <= values.min() and values.max() <= high


@pytest.mark.parametrize("attr, value, message", [
    ("calibration_settings", "[1, 2]", "JSON object"),
    ("scale", '"text"', "JSON object"),
    ("calibration_settings", "[" * 100_000, "not valid JSON"),
    ("cot_offset", 1e300, "cot_offset"),
])
def test_attribute_values_are_type_checked(attr, value, message):
    tree = _tree(naive.make_bank("lart", 12, seed=2))
    tree.attrs[attr] = value
    with pytest.raises(ItemBankSchemaError, match=message):
        ItemBank(tree)


def test_a_bad_responses_group_is_refused():
    from catengine.responses import ResponseData

    bank = naive.make_bank("2pl", 3, seed=2)
    data = ResponseData.from_arrays([[1, 0, 1], [0, 0, 1]], item_ids=bank.item_ids)
    ok = bank.with_group("responses", data.to_dataset())
    assert ok.responses is not None
    seven = xr.Dataset({"correct": (("subject", "item"), np.full((2, 3), 7, dtype=np.int8))},
                       coords={"subject": ["s0", "s1"], "item": list(bank.item_ids)})
    with pytest.raises(ItemBankSchemaError, match="responses"):
        bank.with_group("responses", seven)
    wrong = data.to_dataset()
    wrong.attrs["responses_sha256"] = "0" * 64
    with pytest.raises(ItemBankSchemaError, match="hashes to"):
        bank.with_group("responses", wrong)


# ----------------------------------------------------------------------------- 9. temp files, atomic writes
def test_temp_files_of_killed_writers_are_removed_and_live_ones_kept(tmp_path):
    store = tmp_path / "store" / "testbank"
    store.mkdir(parents=True)
    killed = textwrap.dedent(f"""
        import os, signal, sys
        from catengine.atomic import atomic_output
        with atomic_output({str(store)!r} + "/testbank_v" + sys.argv[1] + ".nc") as tmp:
            tmp.write_bytes(b"x" * 100000)
            os.kill(os.getpid(), signal.SIGKILL)
    """)
    env = dict(os.environ, PYTHONPATH=str(TESTS.parent))
    for version in (1, 2, 3):
        assert subprocess.run([sys.executable, "-c", killed, str(version)], env=env).returncode == -signal.SIGKILL
    live = subprocess.Popen([sys.executable, "-c", killed.replace("os.kill(os.getpid(), signal.SIGKILL)",
                                                                  "print('ready', flush=True); import time; time.sleep(60)"), "4"],
                            env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert live.stdout.readline().strip() == "ready"
        assert len(list(store.glob(".*.tmp"))) == 4
        write_item_bank(naive.make_bank("2pl", 12, seed=1), store)
        left = list(store.glob(".*.tmp"))
        assert len(left) == 1 and f"-{live.pid}." in left[0].name  # only the live writer's file is kept
    finally:
        live.kill()
        live.wait()


def test_to_wide_csv_never_leaves_a_truncated_file(tmp_path, monkeypatch):
    from catengine.responses import ResponseData

    data = ResponseData.from_arrays(np.eye(4, dtype=int))
    target = tmp_path / "acc.csv"
    target.write_text("previous content\n")
    real = Path.write_text

    def dies_half_way(self, text, *args, **kwargs):
        real(self, text[: len(text) // 2], *args, **kwargs)
        raise KeyboardInterrupt  # the process is killed mid-write

    monkeypatch.setattr(Path, "write_text", dies_half_way)
    with pytest.raises(KeyboardInterrupt):
        data.to_wide_csv(target)
    monkeypatch.undo()
    assert target.read_text() == "previous content\n" and not list(tmp_path.glob(".*.tmp"))
