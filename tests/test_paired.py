"""Paired comparisons (catengine.paired): the design's difference is unbiased under a wrong bank, the
confidence sequence holds at data-dependent stops (where a peeked normal interval does not),
decisions between equal LLMs are rare, the calibration-LLM variant, resume, and ``catengine compare``
/ ``catengine rank`` end to end. Every check is against a known truth from simulation."""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest
from scipy.special import expit

from catengine import CATSession, ItemBank, PairedSession, open_item_bank, write_item_bank
from catengine.paired import (BettingConfidenceSequence, Comparison, EmpiricalBernsteinConfidenceSequence,
                              PairedStopping)
from catengine.paired.design import draw_probabilities, power_tuning, step_parts
from catengine.paired.leaderboard import Score, rank
from catengine.responses import ResponseData

J = 60


def _truth(seed=0, n_items=J, guessing=True):
    """The true answer model (3PL with guessing floors: what the banks below get wrong; without
    them, the 2PL of the banks built on the same slopes and intercepts)."""
    rng = np.random.default_rng(seed)
    a = rng.uniform(0.7, 2.0, n_items)
    b = rng.normal(0.0, 1.2, n_items)
    c = rng.uniform(0.1, 0.3, n_items) * guessing
    return a, b, c


def _answers(truth, theta, rng):
    a, b, c = truth
    p = c + (1 - c) * expit(a * theta + b)
    return (rng.random(a.size) < p).astype(int)


def _bank(truth, *, wrong=False, responses=None, bank_id="paired_test"):
    """A 2PL bank on the true slopes and intercepts; ``wrong``: intercepts shifted by +1.5 and
    slopes halved (every prediction off), no guessing floors either way."""
    a, b, _ = truth
    if wrong:
        a, b = 0.5 * a, b + 1.5
    ids = [f"q{j:02d}" for j in range(a.size)]
    return ItemBank.from_params("2pl", ids, bank_id=bank_id, a=a, b=b, responses=responses)


def _replay(session, ya, yb, bank):
    while not session.finished:
        item = session.next_item()
        j = bank.index_of(item)
        session.record(item, int(ya[j]), int(yb[j]))
    return session.comparison(details=False)


def _exact_gap(truth, rng, gap, theta=0.0):
    """Answers of a and b from the truth at one theta, b's flipped until sum(a) - sum(b) = gap."""
    ya, yb = _answers(truth, theta, rng), _answers(truth, theta, rng)
    while ya.sum() - yb.sum() != gap:
        pool = np.flatnonzero(yb == (0 if ya.sum() - yb.sum() > gap else 1))
        yb[rng.choice(pool)] ^= 1
    return ya, yb


def test_the_public_names_exist():
    for name in ("next_item", "record", "finished", "n_items", "comparison"):
        assert hasattr(PairedSession, name), name
    assert {"low", "high", "decision", "difference", "n_items", "method"} <= set(Comparison.__dataclass_fields__)
    bank = _bank(_truth())
    s = PairedSession(bank, rng=0)
    assert s.n_items == 0 and not s.finished
    c = s.comparison()
    assert c.decision == "undecided" and c.low == -1.0 and c.high == 1.0


def test_the_default_cap_is_the_comparisons_own():
    """The default cap is DEFAULT_MAX_ITEMS (docs/comparisons.md, "The default cap"), or every item
    compared when there are fewer; not the single-LLM default stopping rule's."""
    from catengine.paired import DEFAULT_MAX_ITEMS

    assert PairedStopping().cap(5000) == DEFAULT_MAX_ITEMS == 500
    assert PairedStopping().cap(60) == 60 and PairedStopping(max_items=30).cap(60) == 30
    truth = _truth(3)
    bank = _bank(truth)
    rng = np.random.default_rng(1)
    ya, yb = _exact_gap(truth, rng, 0)
    s = PairedSession(bank, rng=2, stopping=PairedStopping(on_decision=False, on_tie=False))
    c = _replay(s, ya, yb, bank)
    assert c.n_items == J and s.stop_reason == "every item compared was answered" and c.low == c.high == 0.0


def test_the_difference_is_unbiased_under_a_wrong_bank():
    """A fixed pair (finite population, truth known exactly), a bank whose predictions are all off:
    the mean of the design's terms after 8 draws is unbiased over replays (within 2 Monte-Carlo SEs),
    while the model's own prediction is biased far beyond its Monte-Carlo error (so the check can
    tell a model-based estimate from a design-based one)."""
    truth = _truth(1)
    rng = np.random.default_rng(5)
    ya, yb = _answers(truth, 0.8, rng), _answers(truth, -0.4, rng)
    delta = (ya - yb).mean()
    bank = _bank(truth, wrong=True)
    design, model = [], []
    for r in range(500):
        c = _replay(PairedSession(bank, rng=r, stopping=PairedStopping(max_items=8, on_decision=False, on_tie=False)),
                    ya, yb, bank)
        design.append(c.design_mean)
        model.append(c.model_difference)
    design, model = np.array(design), np.array(model)
    se = design.std(ddof=1) / math.sqrt(design.size)
    assert abs(design.mean() - delta) <= 2 * se, (design.mean(), delta, se)
    assert abs(model.mean() - delta) > 6 * model.std(ddof=1) / math.sqrt(model.size), (model.mean(), delta)


def test_each_term_has_the_difference_as_its_conditional_mean():
    """One draw's term averaged exactly over the draw distribution (not sampled) equals the
    difference, for any control variate, kappa and draw probabilities."""
    rng = np.random.default_rng(2)
    n, answered = 30, 7.0
    delta = rng.integers(-1, 2, n).astype(float)
    known = np.zeros(n)
    model = rng.uniform(-1, 1, n)
    pi = draw_probabilities(rng.uniform(0, 1, n), 0.3)
    for kappa in (0.0, 0.4, 1.0):
        parts = step_parts(answered, 50, known, model, -np.ones(n), np.ones(n), np.full(n, 0.2), pi, kappa)
        terms = parts.base + (delta - kappa * model) / (50 * pi)
        assert np.sum(pi * terms) == pytest.approx((answered + delta.sum()) / 50, abs=1e-12)
        assert np.all(terms >= parts.lower - 1e-12) and np.all(terms <= parts.upper + 1e-12)
    assert np.all(pi >= 0.3 / n - 1e-15)
    assert power_tuning([0.1, 0.2], [0.3, 0.1]) == 1.0  # too few draws: the model as it is
    x1 = rng.normal(size=50)
    assert power_tuning(x1 + rng.normal(size=50), x1) == pytest.approx(1.0, abs=0.25)  # a useful model
    assert power_tuning(x1, x1 + 3 * rng.normal(size=50)) < 0.3  # a model that only adds noise


class _ForcedDraw:
    """Stands in for a session's generator at one draw: it returns the uniform given."""

    def __init__(self, u):
        self.u = u

    def random(self):
        return self.u


def test_the_sessions_terms_average_to_the_difference_exactly():
    """At several points of a session on a wrong bank, every possible draw is made in turn (the
    generator forced): the terms weighted by their recorded probabilities sum to the true
    difference exactly, whatever the model and kappa are, and the probabilities sum to 1."""
    truth = _truth(10)
    bank = _bank(truth, wrong=True)
    rng = np.random.default_rng(8)
    ya, yb = _answers(truth, 1.2, rng), _answers(truth, -0.3, rng)
    delta = (ya - yb).mean()

    def session_after(t):
        s = PairedSession(bank, rng=3)
        for _ in range(t):
            item = s.next_item()
            s.record(item, int(ya[bank.index_of(item)]), int(yb[bank.index_of(item)]))
        return s

    for t in (0, 4, 9):
        n_left = J - t
        expected = total = 0.0
        seen = set()
        s = session_after(t)
        remaining = [i for i in bank.item_ids if i not in {h.item for h in s.history}]
        cumulative = 0.0
        for _ in range(n_left):  # the uniform just above each item's start on the cumulative scale
            s = session_after(t)
            s._rng = _ForcedDraw(min(cumulative + 1e-12, 1.0 - 1e-15))
            item = s.next_item()
            s.record(item, int(ya[bank.index_of(item)]), int(yb[bank.index_of(item)]))
            step = s.history[-1]
            assert item not in seen
            seen.add(item)
            expected += step.probability * step.term
            total += step.probability
            cumulative += step.probability
        assert seen == set(remaining)
        assert total == pytest.approx(1.0, abs=1e-9)
        assert expected == pytest.approx(delta, abs=1e-9), (t, expected, delta)


def _naive_peeked_miss(terms, truth):
    """Whether the plain normal interval mean +- 1.96 SE of the terms, looked at after every draw
    from the third, ever missed ``truth`` (the interval a peeking user would get)."""
    x = np.asarray(terms)
    for t in range(3, x.size + 1):
        m, se = x[:t].mean(), x[:t].std(ddof=1) / math.sqrt(t)
        if abs(m - truth) > 1.96 * se + 1e-12:
            return True
    return False


def test_the_confidence_sequence_holds_at_every_stop():
    """300 pairs (gaps of 0 to 20 points, a wrong bank), 40 draws each, the interval checked after
    every draw: the share of pairs whose interval ever misses the true difference is within
    alpha + 2 Monte-Carlo SEs; the normal interval peeked at the same steps misses far more often."""
    truth = _truth(3)
    bank = _bank(truth, wrong=True)
    rng = np.random.default_rng(11)
    n_pairs, ever, naive = 300, 0, 0
    for r in range(n_pairs):
        ya, yb = _exact_gap(truth, rng, int(rng.integers(0, 13)), theta=float(rng.normal()))
        delta = (ya - yb).mean()
        s = PairedSession(bank, rng=r, stopping=PairedStopping(max_items=40, on_decision=False, on_tie=False))
        missed = False
        while not s.finished:
            item = s.next_item()
            j = bank.index_of(item)
            s.record(item, int(ya[j]), int(yb[j]))
            low, high = s.interval()
            missed |= not low - 1e-12 <= delta <= high + 1e-12
        ever += missed
        naive += _naive_peeked_miss([h.term for h in s.history], delta)
    limit = 0.05 + 2 * math.sqrt(0.05 * 0.95 / n_pairs)
    assert ever / n_pairs <= limit, ever / n_pairs
    assert naive / n_pairs > limit + 0.05, naive / n_pairs


def test_decisions_between_equal_llms_are_rare_and_unequal_ones_get_decided():
    """Pairs exactly 0 points apart, stopped by the default rule: an "a" or "b" is an error (the
    test's size, at most alpha); pairs 40 points apart are decided, in the right direction."""
    truth = _truth(4)
    bank = _bank(truth)
    rng = np.random.default_rng(12)
    decided = 0
    n = 150
    for r in range(n):
        ya, yb = _exact_gap(truth, rng, 0, theta=float(rng.normal()))
        c = _replay(PairedSession(bank, rng=r), ya, yb, bank)
        decided += c.decision in ("a", "b")
    assert decided / n <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / n)
    right = 0
    for r in range(20):
        ya, yb = _exact_gap(truth, rng, 24, theta=0.0)
        c = _replay(PairedSession(bank, rng=r), ya, yb, bank)
        right += c.decision == "a"
        assert c.decision != "b"
    assert right >= 15


def test_a_tie_needs_the_interval_within_the_margin():
    truth = _truth(5)
    bank = _bank(truth)
    rng = np.random.default_rng(1)
    ya = _answers(truth, 0.0, rng)
    c = _replay(PairedSession(bank, rng=0, margin=0.05, stopping=PairedStopping(max_items=J)), ya, ya.copy(), bank)
    assert c.decision == "tie" and -0.05 <= c.low <= c.high <= 0.05 and c.difference == 0.0


def test_against_a_calibration_llm():
    """Side b a calibration LLM of the bank: only a is asked, b's accuracy is exact, the interval
    holds the truth over replays, and b's stored answer is used (a given one must agree)."""
    truth = _truth(6)
    rng = np.random.default_rng(3)
    Y = np.array([_answers(truth, th, rng) for th in rng.normal(size=30)])
    data = ResponseData.from_arrays(Y.astype(np.int8), subject_ids=[f"llm{i}" for i in range(30)],
                                    item_ids=[f"q{j:02d}" for j in range(J)])
    bank = _bank(truth, wrong=True, responses=data.to_dataset())
    ya = _answers(truth, 1.0, rng)
    target = (ya - Y[4]).mean()
    covered = 0
    for r in range(40):
        s = PairedSession.against_calibration(bank, "llm4", name="mine", rng=r)
        assert s.method == "against-known" and s.sessions[1] is None
        while not s.finished:
            item = s.next_item()
            s.record(item, int(ya[bank.index_of(item)]))
        c = s.comparison()
        assert c.accuracy_b == pytest.approx(Y[4].mean()) and c.subject_b == "llm4"
        covered += c.low - 1e-12 <= target <= c.high + 1e-12
    assert covered >= 37
    s = PairedSession.against_calibration(bank, "llm4", rng=0)
    item = s.next_item()
    stored = int(Y[4][bank.index_of(item)])
    with pytest.raises(ValueError, match="disagrees"):
        s.record(item, 1, 1 - stored)
    s.record(item, 1, stored)
    with pytest.raises(KeyError, match="not a calibration LLM"):
        PairedSession.against_calibration(bank, "nobody")


def test_bad_input_leaves_the_session_unchanged():
    bank = _bank(_truth())
    s = PairedSession(bank, rng=0)
    with pytest.raises(ValueError, match="next_item"):
        s.record("q00", 1, 0)
    item = s.next_item()
    other = next(i for i in bank.item_ids if i != item)
    with pytest.raises(ValueError, match="proposed item"):
        s.record(other, 1, 0)
    with pytest.raises(ValueError, match="0 or 1"):
        s.record(item, 2, 0)
    with pytest.raises(ValueError, match="required"):
        s.record(item, 1)
    assert s.n_items == 0 and s.next_item() == item
    s.record(item, 1, 0)
    assert s.n_items == 1 and s.sessions[0].n_items == s.sessions[1].n_items == 1


def test_resume_rebuilds_the_same_session(tmp_path):
    truth = _truth(7)
    bank = open_item_bank(write_item_bank(_bank(truth), tmp_path / "bank"))
    rng = np.random.default_rng(0)
    ya, yb = _answers(truth, 0.5, rng), _answers(truth, 0.0, rng)
    log = tmp_path / "pair.jsonl"
    s = PairedSession(bank, rng=9, log=log, subjects=("x", "y"))
    for _ in range(6):
        item = s.next_item()
        s.record(item, int(ya[bank.index_of(item)]), int(yb[bank.index_of(item)]))
    pending = s.next_item()
    before = s.comparison()
    s.close()
    r = PairedSession.resume(log)
    assert r.comparison() == before and r.subjects == ("x", "y") and r.next_item() == pending
    r.record(pending, int(ya[bank.index_of(pending)]), int(yb[bank.index_of(pending)]))
    r.close()
    assert PairedSession.resume(log, bank).n_items == 7


def _naive_betting_interval(grid, terms, lower, upper, mean_guess, var_guess, alpha=0.05, c=0.75):
    """The hedged betting sequence written out from its definition, candidate by candidate: the
    running mean and variance with one pseudo-observation (the variance scaled by the guess), the
    bets (mu_hat - m) / (s2 + (mu_hat - m)^2) split by sign and capped at c / (m - L), c / (U - m),
    a candidate rejected once max(K+, K-) / 2 >= 1 / alpha."""
    alive = []
    for m in grid:
        kp = km = 1.0
        ok = True
        total = ratios = 0.0
        for t, x in enumerate(terms):
            mu = (mean_guess[t] + total) / (t + 1)
            s2 = var_guess[t] * (1.0 + ratios) / (t + 1)
            bet = (mu - m) / (s2 + (mu - m) ** 2)
            up = max(bet, 0.0) if m <= lower[t] else min(max(bet, 0.0), c / (m - lower[t]))
            down = max(-bet, 0.0) if m >= upper[t] else min(max(-bet, 0.0), c / (upper[t] - m))
            kp *= 1.0 + up * (x - m)
            km *= 1.0 - down * (x - m)
            ok &= max(kp, km) / 2 < 1.0 / alpha
            ratios += (x - mu) ** 2 / var_guess[t]
            total += x
        alive.append(ok)
    alive = np.array(alive)
    return grid[alive].min(), grid[alive].max()


def test_the_betting_sequence_matches_its_definition():
    rng = np.random.default_rng(4)
    grid = np.linspace(-1, 1, 201)
    n = 25
    lower, upper = -rng.uniform(1, 2, n), rng.uniform(1, 2, n)
    terms = np.clip(0.3 + rng.normal(0, 0.5, n), lower, upper)
    mean_guess, var_guess = rng.uniform(-0.2, 0.2, n), rng.uniform(0.1, 0.4, n)
    cs = BettingConfidenceSequence(grid)
    for t in range(n):
        cs.update(terms[t], lower[t], upper[t], mean_guess[t], var_guess[t])
        assert cs.interval() == pytest.approx(_naive_betting_interval(grid, terms[:t + 1], lower, upper, mean_guess,
                                                                      var_guess), abs=1e-12), t


def test_the_capital_at_the_true_mean_is_a_martingale():
    """E[K+_t(mu)] = E[K-_t(mu)] = 1 over 3000 paths of skewed bounded terms with mean mu (within 3
    Monte-Carlo SEs): the bets are predictable and every factor stays positive."""
    rng = np.random.default_rng(9)
    grid = np.linspace(-1, 1, 41)
    mu = 0.1
    up, down = [], []
    for _ in range(3000):
        cs = BettingConfidenceSequence(grid)
        for _ in range(12):
            x = mu + (0.9 if rng.random() < 0.1 else -0.1)  # mean mu, rare large values
            cs.update(x, -1.0, 1.0, 0.0, 0.1)
        kp, km = cs.capital(mu)
        up.append(kp)
        down.append(km)
    for k in (np.array(up), np.array(down)):
        assert abs(k.mean() - 1.0) <= 3 * k.std(ddof=1) / math.sqrt(k.size) + 1e-9, k.mean()


def test_confidence_sequences_on_iid_terms():
    """Both sequences hold the mean of bounded i.i.d. terms at every step (ever-miss within alpha
    + 2 MC SEs over 300 paths), and the betting one ends narrower."""
    grid = np.linspace(-1, 1, 401)
    rng = np.random.default_rng(0)
    misses = {"betting": 0, "eb": 0}
    widths = {"betting": [], "eb": []}
    for _ in range(300):
        mu = rng.uniform(-0.5, 0.5)
        cs = {"betting": BettingConfidenceSequence(grid), "eb": EmpiricalBernsteinConfidenceSequence()}
        ever = dict.fromkeys(cs, False)
        for _ in range(60):
            x = mu + rng.uniform(-0.5, 0.5)
            for name, seq in cs.items():
                seq.update(x, mu - 0.5 - 1e-9 if name == "eb" else -1.0, mu + 0.5 + 1e-9 if name == "eb" else 1.0,
                           0.0, 0.1)
                low, high = seq.interval()
                ever[name] |= not low - 0.0026 <= mu <= high + 0.0026  # the grid's spacing
        for name, seq in cs.items():
            misses[name] += ever[name]
            widths[name].append(np.subtract(*seq.interval()[::-1]))
    limit = 300 * (0.05 + 2 * math.sqrt(0.05 * 0.95 / 300))
    assert misses["betting"] <= limit and misses["eb"] <= limit, misses
    assert np.mean(widths["betting"]) < np.mean(widths["eb"])
    with pytest.raises(ValueError, match="outside its predictable bounds"):
        BettingConfidenceSequence(grid).update(2.0, -1.0, 1.0)


def test_lart_banks_compare_cot_cost():
    bank = open_item_bank("math500_lart")
    r = bank.responses
    subjects = [str(s) for s in r["subject"].values]
    i, k = subjects.index("Qwen_Qwen3_8B_zero_shot"), subjects.index("Qwen_Qwen3_8B_one_shot")
    order = np.array([bank.index_of(str(x)) for x in r["item"].values])
    y = np.empty((2, bank.n_items))
    t = np.empty((2, bank.n_items))
    y[:, order], t[:, order] = r["correct"].values[[i, k]], r["cot_length"].values[[i, k]]
    s = PairedSession(bank, rng=0, stopping=20)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        while not s.finished:
            item = s.next_item()
            j = bank.index_of(item)
            s.record(item, int(y[0, j]), int(y[1, j]), t[0, j], t[1, j])
    c = s.comparison()
    assert c.cot_total_a > 0 and c.cot_total_b > 0 and c.cot_difference == pytest.approx(c.cot_total_a - c.cot_total_b)
    assert c.cot_difference_design is not None and c.cot_difference_sd > 0
    assert c.to_dict()["decision"] in ("a", "b", "tie", "undecided")


def test_rank_separates_in_the_right_order_and_reports_ties():
    scores = [Score("top", 0.80, 0.75, 0.85, 0.025), Score("mid", 0.60, 0.55, 0.65, 0.025),
              Score("mid2", 0.61, 0.56, 0.66, 0.025), Score("low", 0.20, 0.15, 0.25, 0.025)]
    board = rank(scores)
    assert [s.subject for s in board.scores] == ["top", "mid2", "mid", "low"]
    assert board.pair("top", "low").separated and board.pair("top", "low").better == "top"
    assert not board.pair("mid", "mid2").separated
    assert board.ties("mid") == ["mid2"] and board.rank_range("mid") == (2, 3) and board.rank_range("top") == (1, 1)
    # the pairs' intervals are Bonferroni's over the 6 pairs: wider than one pair's 95% interval
    p = board.pair("top", "mid")
    assert (p.high - p.low) / 2 > 1.96 * math.hypot(0.025, 0.025)
    holm = rank(scores, correction="holm")
    assert sum(q.separated for q in holm.pairs) >= sum(q.separated for q in board.pairs)


def _bank_on_disk(tmp_path, truth):
    return write_item_bank(_bank(truth), tmp_path / "bank")


def test_catengine_compare_end_to_end(tmp_path, capsys):
    from catengine.cli import main

    truth = _truth(8)
    path = _bank_on_disk(tmp_path, truth)
    rng = np.random.default_rng(4)
    files = []
    for name, theta in (("a", 2.0), ("b", -2.0)):
        y = _answers(truth, theta, rng)
        f = tmp_path / f"{name}.csv"
        f.write_text("item,correct\n" + "".join(f"q{j:02d},{y[j]}\n" for j in range(J)))
        files.append((f, y))
    assert main(["compare", "--bank", str(path), "--responses", str(files[0][0]), str(files[1][0]), "--seed", "1",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["decision"] == "a" and out["low"] > 0 and out["method"] == "paired"
    assert out["low"] <= (files[0][1] - files[1][1]).mean() <= out["high"]
    assert main(["compare", "--bank", str(path), "--responses", str(files[0][0]), str(files[1][0]), "--seed", "1"]) == 0
    assert "a is better" in capsys.readouterr().out
    assert main(["compare", "--bank", str(path), "--responses", str(files[0][0])]) == 2  # b missing: an error


def test_catengine_rank_end_to_end(tmp_path, capsys):
    from catengine.cli import main

    truth = _truth(9, n_items=120, guessing=False)  # the sessions' own scores rest on the bank: a right one here
    path = _bank_on_disk(tmp_path, truth)
    bank = open_item_bank(path)
    rng = np.random.default_rng(6)
    logs, accuracy = [], {}
    for name, theta in (("strong", 2.5), ("weak", -2.5), ("mid", 0.0), ("mid2", 0.05)):
        y = _answers(truth, theta, rng)
        accuracy[name] = y.mean()
        log = tmp_path / f"{name}.jsonl"
        with CATSession(bank, rng=1, subject=name, log=log) as s:
            while not s.finished:
                item = s.next_item()
                s.record(item, int(y[bank.index_of(item)]))
        logs.append(str(log))
    before = [open(f, "rb").read() for f in logs]
    assert main(["rank", *logs, "--json"]) == 0
    board = json.loads(capsys.readouterr().out)
    assert [open(f, "rb").read() for f in logs] == before  # the logs are read, not changed
    names = [s["subject"] for s in board["scores"]]
    assert names[0] == "strong" and names[-1] == "weak"
    for p in board["pairs"]:
        if p["separated"]:
            worse = p["b"] if p["better"] == p["a"] else p["a"]
            assert accuracy[p["better"]] > accuracy[worse]
    assert any(not p["separated"] for p in board["pairs"] if {p["a"], p["b"]} == {"mid", "mid2"})
    assert main(["rank", *logs]) == 0
    text = capsys.readouterr().out
    assert "tied with" in text and "pairs separated" in text


def test_the_paired_protocol_drives_a_session():
    import io

    from catengine.paired.serve import serve_pair

    truth = _truth(11)
    bank = _bank(truth)
    rng = np.random.default_rng(2)
    ya, yb = _answers(truth, 2.0, rng), _answers(truth, -2.0, rng)
    session = PairedSession(bank, rng=0)
    out = io.StringIO()
    requests = ['{"op": "next", "id": 1}', '{"op": "record", "item": "nope", "correct_a": 1, "correct_b": 0}', "not json"]
    serve_pair(session, io.StringIO("\n".join(requests) + "\n"), out)
    replies = [json.loads(line) for line in out.getvalue().splitlines()]
    assert replies[0]["ok"] and replies[0]["id"] == 1 and replies[0]["protocol"] == "paired-1"
    assert not replies[1]["ok"] and "proposed item" in replies[1]["error"] and not replies[2]["ok"]
    while not session.finished:  # the harness's loop, one request at a time
        out = io.StringIO()
        serve_pair(session, io.StringIO('{"op": "next"}\n'), out)
        item = json.loads(out.getvalue())["item"]
        j = bank.index_of(item)
        out = io.StringIO()
        serve_pair(session, io.StringIO(json.dumps({"op": "record", "item": item, "correct_a": int(ya[j]),
                                                    "correct_b": int(yb[j])}) + "\n"), out)
        reply = json.loads(out.getvalue())
    assert reply["finished"] and reply["comparison"]["decision"] == "a"
