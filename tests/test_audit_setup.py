"""Audit seeds, ability specifications and altered banks (calibration.common.stream, calibration.audit._common)."""

from __future__ import annotations

import numpy as np
import pytest

from calibration.audit import AbilitySpec, alter_bank, recovery_audit
from calibration.audit import metrics as M
from calibration.common import stream
from audit_cases import _bank_2pl, _bank_lart

# ============================================================================ seeds, specs, banks
def test_streams_are_spawned_children():
    root = np.random.SeedSequence(42)
    children = root.spawn(3)
    for r, child in enumerate(children):
        assert np.array_equal(stream(42, r).generate_state(4), child.generate_state(4))
    # tags descend like spawn, addressed by value
    assert np.array_equal(stream(42, 1, 5).generate_state(4), children[1].spawn(6)[5].generate_state(4))


def test_ability_specs():
    spec = AbilitySpec("skew-normal:skew=8")
    assert spec.family == "skew-normal" and spec.kwargs == {"skew": 8.0}
    x = spec.draw(2000, np.random.default_rng(0))
    assert M.skewness_g1(x) > 0.5
    with pytest.raises(ValueError, match="unknown ability family"):
        AbilitySpec("lognormal")
    with pytest.raises(ValueError, match="key=value"):
        AbilitySpec("normal:skew")
    with pytest.raises(ValueError, match="subjects"):
        recovery_audit(_bank_2pl(), 30, ability="bank", replications=1, n_workers=1, progress=False)


def test_abilities_resampled_from_the_banks_calibration_subjects():
    from calibration.methods.cbmm.calibrator import CBMMCalibrator
    from calibration.simulate import simulate_dataset

    data, truth = simulate_dataset("2pl", 80, 30, rng=4, ability="skew-normal", ability_kwargs={"skew": 6})
    fitted = CBMMCalibrator(progress=False).fit(data).to_item_bank("fitted_bank")
    ds = recovery_audit(fitted, [40], ability="bank", replications=2, rng=1, n_workers=1, progress=False)
    assert list(ds["ability"].values) == ["bank"] and not bool((ds["failed"] == 1).any())


def test_alter_bank():
    bank = _bank_lart(20)
    wrong = alter_bank(bank, a_scale=2.0, b_shift=0.5, rho=0.0, sparsity=0.25, rng=1)
    p, q = bank.params, wrong.params
    zero = q.a == 0
    assert zero.sum() == 5
    assert q.a[~zero] == pytest.approx(2 * p.a[~zero])
    assert q.b == pytest.approx(p.b + 0.5)
    assert q.rho == 0.0 and q.omega == pytest.approx(p.omega)
    assert wrong.item_ids == bank.item_ids
