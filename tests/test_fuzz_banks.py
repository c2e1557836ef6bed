"""Fuzz: bank files and bank contents. Property: a named error or a valid bank, never a hang or a
foreign exception; a bank that opens is usable by a session (finite estimates, loggable)."""

import json
import math
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fuzz_support import ScratchFolder, fuzz_settings

import naive_engine as naive
from catengine import ItemBank, open_item_bank, write_item_bank
from catengine.errors import ItemBankSchemaError
from catengine.itembank import guard
from catengine.itembank.schema import PLAUSIBLE_RANGES
from catengine.session import CATSession
from catengine.stopping import MaxItems

FUZZ = fuzz_settings(40)  # bounded and deterministic in CI

with tempfile.TemporaryDirectory(prefix="fuzz_banks_") as _tmp:  # the bytes the fuzzer damages
    _BYTES = write_item_bank(naive.make_bank("lart", 8, seed=3, metadata=False), Path(_tmp) / "store" / "testbank").read_bytes()
SCRATCH = ScratchFolder("fuzz_banks_")
_scratch_folder = SCRATCH.fixture()


@pytest.fixture(autouse=True, scope="module")
def short_probe_deadline():
    old = guard.PROBE_TIMEOUT
    guard.PROBE_TIMEOUT = 5.0  # a damaged file that loops costs 5 s, not 30
    yield
    guard.PROBE_TIMEOUT = old


def _check_usable(bank):
    """A bank that opened must run a short session with finite results."""
    params = bank.params
    for name in params.parameter_names:
        low, high = PLAUSIBLE_RANGES[name]
        values = getattr(params, name)
        assert np.all((values >= low) & (values <= high))
    s = CATSession(bank, stopping=MaxItems(3), rng=0)
    for k in range(3):
        item = s.next_item()
        s.record(item, k % 2, cot_length=100.0 if params.response_model == "lart" else None)
    assert math.isfinite(s.estimate.theta) and math.isfinite(s.estimate.theta_sd) and s.estimate.theta_sd > 0


edits = st.lists(st.tuples(st.integers(0, len(_BYTES) - 1), st.integers(0, 255)), min_size=1, max_size=4)


@FUZZ
@given(edits=edits, cut=st.one_of(st.none(), st.integers(0, len(_BYTES))))
def test_damaged_bank_files(edits, cut):
    data = bytearray(_BYTES)
    for pos, value in edits:
        data[pos] = value
    if cut is not None:
        data = data[:cut]
    path = SCRATCH.new("_damaged.nc")
    path.write_bytes(bytes(data))
    try:
        bank = open_item_bank(path)
    except ItemBankSchemaError as exc:
        assert str(path) in str(exc)
    else:
        _check_usable(bank)
    finally:
        path.unlink()


def _containers(inner):
    return st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)


json_like = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20), _containers,
                         max_leaves=6)
attr_values = st.one_of(
    st.integers(-10**6, 10**6), st.floats(), st.text(max_size=30), json_like.map(json.dumps),
    st.lists(st.integers(-5, 5), min_size=1, max_size=3).map(np.array),
)
ATTRS = ["schema", "schema_version", "bank_id", "bank_version", "parent_version", "response_model", "calibration_method",
         "calibration_settings", "scale", "cot_offset", "responses_sha256", "n_subjects", "content_sha256"]


@FUZZ
@given(changes=st.dictionaries(st.sampled_from(ATTRS), attr_values, min_size=1, max_size=3))
def test_fuzzed_root_attributes(changes):
    tree = naive.make_bank("lart", 6, seed=1).to_datatree()
    tree.attrs.update(changes)
    try:
        bank = ItemBank(tree)
    except ItemBankSchemaError:
        return
    _check_usable(bank)
    bank.calibration_settings, bank.scale  # noqa: B018 - decodable JSON objects
    assert isinstance(bank.calibration_settings, dict) and isinstance(bank.scale, dict)


parameter = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([1e300, -1e300, 5e-324, 0.0, 1e-3, 49.9, 50.1]))


@FUZZ
@given(model=st.sampled_from(["2pl", "4pl", "lart"]), name=st.sampled_from(["a", "b", "c", "d", "omega", "phi", "lam"]),
       value=parameter, index=st.integers(0, 5))
def test_fuzzed_parameter_values(model, name, value, index):
    base = naive.make_bank(model, 6, seed=2, metadata=False)
    arrays = {n: np.array(getattr(base.params, n)) for n in base.params.parameter_names}
    if name in arrays:
        arrays[name][index] = value
    extra = dict(rho=-0.6, cot_offset=1.0) if model == "lart" else {}
    try:
        bank = ItemBank.from_params(model, base.item_ids, bank_id="fuzz", **extra, **arrays)
    except ValueError:  # ItemBankSchemaError is a ValueError too
        return
    _check_usable(bank)
