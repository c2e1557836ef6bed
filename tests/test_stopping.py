"""Stopping rules: semantics, composition, and a contract run of every rule inside sessions."""

import math

import numpy as np
import pytest
import xarray as xr

import naive_engine as naive
from catengine.estimation import TraitEstimate
from catengine.session import CATSession
from catengine.stopping import (
    STOPPING_RULES,
    AllOf,
    AnyOf,
    InformationBelow,
    MaxItems,
    MinItems,
    RivalOrderDecided,
    ScoreIntervalBelow,
    StandardErrorBelow,
    StopState,
    default_stopping,
)


def _state(n=3, theta=0.2, sd=0.4, tau=None, tau_sd=None, n_eligible=10, max_info=1.0):
    est = TraitEstimate(theta=theta, theta_sd=sd, n_items=n, tau=tau, tau_sd=tau_sd, theta_tau_cov=0.0 if tau is not None else None)
    return StopState(n, est, n_eligible, lambda: max_info)


def test_simple_rules():
    assert MaxItems(3).is_met(_state(n=3)) and not MaxItems(4).is_met(_state(n=3))
    assert MinItems(3).is_met(_state(n=3)) and not MinItems(4).is_met(_state(n=3))
    assert StandardErrorBelow(0.4).is_met(_state(sd=0.4)) and not StandardErrorBelow(0.39).is_met(_state(sd=0.4))
    assert not StandardErrorBelow(0.5, trait="tau").is_met(_state())  # logistic bank: no tau
    assert StandardErrorBelow(0.5, trait="tau").is_met(_state(tau=0.0, tau_sd=0.3))
    assert InformationBelow(0.01).is_met(_state(max_info=0.001))
    assert not InformationBelow(0.01).is_met(_state(max_info=0.5))
    assert InformationBelow(0.01).is_met(_state(n_eligible=0, max_info=math.nan))
    assert "reached 3 items" in MaxItems(3).reason(_state(n=3))


def test_composition():
    rule = AnyOf(AllOf(MinItems(5), StandardErrorBelow(0.3)), MaxItems(20))
    assert not rule.is_met(_state(n=4, sd=0.1))  # too few items
    assert rule.is_met(_state(n=5, sd=0.3))
    assert not rule.is_met(_state(n=19, sd=0.5))
    assert "20" in rule.reason(_state(n=20, sd=0.5))
    assert AnyOf([MaxItems(2), MaxItems(3)]) == AnyOf(MaxItems(2), MaxItems(3))  # a list works too
    # the default: the predicted score within 5 points after 10 items, or 100 items, both capped at the bank size
    assert default_stopping(500) == AnyOf(AllOf(MinItems(10), ScoreIntervalBelow(0.05)), MaxItems(100))
    assert default_stopping(40) == AnyOf(AllOf(MinItems(10), ScoreIntervalBelow(0.05)), MaxItems(40))
    assert default_stopping(6) == AnyOf(AllOf(MinItems(6), ScoreIntervalBelow(0.05)), MaxItems(6))


def test_validation():
    for bad in (lambda: MaxItems(0), lambda: MinItems(-1), lambda: StandardErrorBelow(0),
                lambda: StandardErrorBelow(0.3, trait="speed"), lambda: InformationBelow(-1),
                lambda: RivalOrderDecided(rivals=()), lambda: RivalOrderDecided(rivals=(("a", 0.0, 0.1),), probability=0.4),
                lambda: MaxItems(2.5), lambda: MaxItems(True)):
        with pytest.raises(ValueError):
            bad()
    with pytest.raises(TypeError):
        AnyOf(MaxItems(2), "max")
    with pytest.raises(ValueError):
        AllOf()


def test_rival_order_probabilities():
    rule = RivalOrderDecided(rivals={"gpt": (0.0, 0.1), "llama": (2.0, 0.1)}, probability=0.95)
    probs = rule.probabilities(TraitEstimate(theta=1.0, theta_sd=0.2, n_items=5))
    z = 1.0 / math.sqrt(0.2**2 + 0.1**2)
    assert probs["gpt"] == pytest.approx(0.5 * math.erfc(-z / math.sqrt(2)), rel=1e-12)
    assert probs["llama"] == pytest.approx(1 - probs["gpt"], rel=1e-12)
    assert rule.is_met(_state(theta=1.0, sd=0.2))
    assert not rule.is_met(_state(theta=1.9, sd=0.2))  # too close to llama


def test_rival_order_from_bank_subjects():
    subjects = xr.Dataset({"theta": ("subject", [-1.0, 0.5, 2.0]), "theta_sd": ("subject", [0.1, 0.1, 0.1])},
                          coords={"subject": ["weak", "mid", "strong"]})
    bank = naive.make_bank("2pl", 120, seed=1, subjects=subjects)
    rule = RivalOrderDecided.from_bank(bank, ["weak", "strong"])
    assert rule.rivals == (("weak", -1.0, 0.1), ("strong", 2.0, 0.1))
    with pytest.raises(KeyError, match="not a subject"):
        RivalOrderDecided.from_bank(bank, ["nobody"])
    with pytest.raises(ValueError, match="no calibration subjects"):
        RivalOrderDecided.from_bank(naive.make_bank("2pl", 10, seed=1), ["weak"])
    # in a session: a mid-ability subject is quickly ordered against weak and strong
    oracle, _ = naive.make_oracle(bank.params, seed=3, theta=0.5)
    s = CATSession(bank, stopping=AnyOf(rule, MaxItems(120)), rng=0)
    while not s.finished:
        item = s.next_item()
        s.record(item, oracle[bank.index_of(item)][0])
    assert "decided" in s.stop_reason and s.n_items < 60


def _contract_rules(bank):
    return [
        MaxItems(7),
        AllOf(MinItems(4), StandardErrorBelow(0.45)),
        AnyOf(StandardErrorBelow(0.35), MaxItems(30)),
        AnyOf(InformationBelow(0.2), MaxItems(40)),
        AnyOf(RivalOrderDecided(rivals=(("r1", -1.5, 0.1), ("r2", 1.5, 0.1))), MaxItems(40)),
        AnyOf(MinItems(40), MaxItems(40)),
        AnyOf(AllOf(MinItems(3), ScoreIntervalBelow(0.12)), MaxItems(40)),
    ]


def test_every_registered_rule_is_in_the_contract_suite():
    bank = naive.make_bank("2pl", 40, seed=2)
    seen = set()

    def walk(r):
        seen.add(type(r))
        for sub in getattr(r, "rules", ()):
            walk(sub)

    for r in _contract_rules(bank):
        walk(r)
    assert seen == set(STOPPING_RULES.values())


@pytest.mark.parametrize("model", ["2pl", "lart"])
def test_stopping_contract(model):
    """Inside a session every rule stops at the first step where it is met (never later, never
    earlier), no item is proposed twice, and the run is reproducible."""
    bank = naive.make_bank(model, 40, seed=2)
    oracle, _ = naive.make_oracle(bank.params, seed=4)
    for rule in _contract_rules(bank):
        runs = []
        for _ in range(2):
            s = CATSession(bank, stopping=rule, rng=1)
            seen = []
            while not s.finished:
                state = StopState(s.n_items, s.estimate, 40 - s.n_items, s._max_information, s._stopping_score)
                assert not rule.is_met(state)
                item = s.next_item()
                assert item not in seen
                seen.append(item)
                s.record(item, *oracle[bank.index_of(item)])
            assert rule.is_met(StopState(s.n_items, s.estimate, 40 - s.n_items, s._max_information,
                                         s._stopping_score)) or s.n_items == 40
            runs.append((seen, s.estimate))
        assert runs[0] == runs[1]


class _Score:
    def __init__(self, accuracy, low, high):
        self.accuracy, self.low, self.high = accuracy, low, high


def test_score_interval_rule_semantics_and_validation():
    calls = []

    def score(level):
        calls.append(level)
        return _Score(0.70, 0.66, 0.75)  # half-width 0.045, asymmetric

    est = TraitEstimate(theta=0.0, theta_sd=0.5, n_items=9)
    state = StopState(9, est, 20, predicted_score=score)
    assert ScoreIntervalBelow(0.045).is_met(state) and not ScoreIntervalBelow(0.044).is_met(state)
    assert "known to within +-4.5 points (95% interval, target +-5 points)" in ScoreIntervalBelow(0.05).reason(state)
    ScoreIntervalBelow(0.05, level=0.9).reason(state)
    assert calls == [0.95, 0.9]  # computed once per level and state, however many rules ask
    with pytest.raises(ValueError, match="cannot predict the full-benchmark score"):
        ScoreIntervalBelow(0.05).reason(_state())
    for bad in (dict(half_width=0), dict(half_width=0.5), dict(half_width=math.nan), dict(level=1.0), dict(level=0)):
        with pytest.raises(ValueError):
            ScoreIntervalBelow(**bad)


def test_score_interval_rule_stops_at_the_first_precise_enough_step():
    """In a session the rule stops exactly when the session's own predicted_score() interval first
    has half-width <= the target (checked step by step against an independent call)."""
    bank = naive.make_bank("2pl", 60, seed=7)
    oracle, _ = naive.make_oracle(bank.params, seed=8)
    target = 0.1
    s = CATSession(bank, stopping=AnyOf(ScoreIntervalBelow(target), MaxItems(60)), rng=0)
    halves = []
    while not s.finished:
        score = s.predicted_score(by=False)
        halves.append(0.5 * (score.high - score.low))
        item = s.next_item()
        s.record(item, oracle[bank.index_of(item)][0])
    final = s.predicted_score(by=False)
    assert 0.5 * (final.high - final.low) <= target and "known to within" in s.stop_reason
    assert all(h > target for h in halves)  # never precise enough before
    assert 3 < s.n_items < 60  # it did have to wait, and did not run to the end


def test_information_below_uses_eligible_items_only():
    from catengine.models import logistic

    bank = naive.make_bank("2pl", 12, seed=5)
    s = CATSession(bank, stopping=InformationBelow(1e-9), rng=0)
    info = logistic.item_information(bank.params, s.estimate.theta)  # at the current estimate
    assert s._max_information() == pytest.approx(info.max(), rel=1e-12)
    keep = int(np.argmin(info))  # exclude all but the least informative item
    assert info[keep] < info.max()
    for j, item in enumerate(bank.item_ids):
        if j != keep:
            s.exclude(item)
    assert s._max_information() == pytest.approx(info[keep], rel=1e-12)
    s.exclude(bank.item_ids[keep])
    assert s.finished and s.stop_reason == "no item left in the bank"
