"""Trait SDs that never widen with more answers faster than the posterior (docs/math.md §7.5):
on every shipped bank, a default session replaying a real calibration LLM's answers reports, at
every step, an SD and a 95% interval that shrink at least as fast as the model's own posterior SD
(the reported SD divided by the interval factor the bank's check applied)."""

import numpy as np
import pytest

from catengine import CATSession, list_banks, open_item_bank
from catengine.responses.data import MISSING
from catengine.stopping import MaxItems

# the shipped banks with a cross-fitted interval check (the simulated demo bank has none: its SDs are the posterior's)
SHIPPED = sorted(b["bank_id"] for b in list_banks() if "interval_calibration" in open_item_bank(b["bank_id"]).attrs)


def test_every_shipped_real_bank_is_checked():
    assert {"math500_lart", "math500_2pl", "amc23_lart", "chembench_2pl"} <= set(SHIPPED)


def replay(bank, row, n):
    """A default session (the bank's default selector and estimator) answering with a stored row."""
    correct = np.asarray(bank.responses["correct"].values[row])
    cot = bank.responses["cot_length"].values[row] if "cot_length" in bank.responses else None
    s = CATSession(bank, stopping=MaxItems(n), rng=int(row))
    estimates = []
    while not s.finished:
        item = s.next_item()
        j = bank.index_of(item)
        if correct[j] == MISSING:
            s.exclude(item)
            continue
        tokens = None if cot is None or bank.response_model != "lart" else float(cot[j])
        s.record(item, int(correct[j]), tokens)
        estimates.append(s.estimate)
    return estimates


@pytest.mark.parametrize("bank_id", SHIPPED)
def test_reported_trait_sd_shrinks_at_least_as_fast_as_the_posterior(bank_id):
    bank = open_item_bank(bank_id)
    n_rows = bank.responses.sizes["subject"]
    rows = np.unique(np.linspace(0, n_rows - 1, 3).astype(int))  # the weakest, middle and last stored runs
    checked = 0
    for row in rows:
        est = replay(bank, int(row), min(60, bank.n_items))
        for prev, cur in zip(est, est[1:]):
            posterior_ratio = (cur.theta_sd / cur.interval_factor) / (prev.theta_sd / prev.interval_factor)
            assert cur.interval_factor <= prev.interval_factor + 1e-12
            assert cur.theta_sd / prev.theta_sd <= posterior_ratio * (1 + 1e-9)
            lo0, hi0 = prev.interval(0.95)
            lo1, hi1 = cur.interval(0.95)
            assert (hi1 - lo1) / (hi0 - lo0) <= posterior_ratio * (1 + 1e-9)
            checked += 1
    assert checked >= 3 * 20
