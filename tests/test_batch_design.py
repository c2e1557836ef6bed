"""Design draws in batches (``CATSession.next_items`` with a known-probability selector).

A batch's design draws are made one slot after another from the items still eligible (the answers
before the batch and the batch's earlier items excluded), so each has a known probability given
the earlier slots; the design-based estimate counts, at each draw, the answers before the batch
and the batch's earlier items as known (``catengine.session.scoring.design_draws``). Checked here:
the schedule and the recorded contexts, unbiasedness and the variance estimate by simulation with
a deliberately wrong bank and answers recorded in random order within each batch, k = 1 as the
sequential engine, and a resumed half-answered batch."""

import math

import numpy as np
import pytest
from scipy.special import expit

from catengine import CATSession, ItemBank
from catengine.selection import DoublyRobustSelection, RandomisedSelection
from catengine.selection.doubly_robust import scheduled_design_draw
from catengine.session import scoring as session_scoring
from catengine.stopping import MaxItems


def bank_2pl(J, seed):
    rng = np.random.default_rng(seed)
    return ItemBank.from_params("2pl", [f"i{j:03d}" for j in range(J)], bank_id="batch-design",
                                a=rng.lognormal(0.2, 0.3, J), b=rng.normal(0.0, 1.2, J))


def run_batches(bank, y, n, k, selector, rng_seed, order_rng=None, log=None):
    """A session of ``n`` answers proposed in batches of ``k``, each batch answered in a random order."""
    s = CATSession(bank, selector=selector, stopping=MaxItems(n), rng=rng_seed, log=log, subject="llm")
    while not s.finished:
        batch = s.next_items(k)
        if order_rng is not None:
            batch = [batch[i] for i in order_rng.permutation(len(batch))]
        for item in batch:
            s.record(item, int(y[bank.index_of(item)]))
    return s


def test_batches_draw_by_design_on_the_schedule_with_their_contexts():
    J = 80
    bank = bank_2pl(J, 1)
    y = (np.random.default_rng(2).random(J) < 0.55).astype(int)
    s = run_batches(bank, y, 24, 6, DoublyRobustSelection(share=0.5), 3)
    h = s.history
    # with half the steps adaptive: the first batch, chosen before any answer is known, is all design
    # draws (the opening counts the answers known); later slots follow the sequential schedule, each
    # counting the batch's earlier items as answered (the bank stores no calibration LLMs: share 0.5)
    assert [r.design for r in h] == [True] * 6 + [scheduled_design_draw(t, 0.5) for t in range(6, 24)]
    for t, r in enumerate(h):
        first = (t // 6) * 6
        if r.design:
            assert r.draw.answered == first  # drawn before any answer of its batch was known
            assert [bank.item_ids[j] for j in r.draw.selected] == [x.item for x in h[first:t]]
            assert 0 < r.criterion <= 1
        else:
            assert r.draw is None
    score = s.predicted_score(by=False)
    assert score.method == "doubly-robust" and score.n_design == sum(r.design for r in h)


def test_a_batch_of_one_is_the_sequential_session():
    J = 70
    bank = bank_2pl(J, 4)
    y = (np.random.default_rng(5).random(J) < 0.4).astype(int)
    seq = CATSession(bank, selector=DoublyRobustSelection(), stopping=MaxItems(15), rng=7)
    while not seq.finished:
        item = seq.next_item()
        seq.record(item, int(y[bank.index_of(item)]))
    bat = run_batches(bank, y, 15, 1, DoublyRobustSelection(), 7)
    assert [r.item for r in bat.history] == [r.item for r in seq.history]
    assert [(r.design, r.criterion) for r in bat.history] == [(r.design, r.criterion) for r in seq.history]
    for a, b in zip(bat.history, seq.history):
        assert (a.draw is None) == (b.draw is None)
        if a.draw is not None:
            assert (a.draw.answered, a.draw.selected) == (b.draw.answered, b.draw.selected)
            assert (a.draw.estimate.theta, a.draw.estimate.theta_sd) == (b.draw.estimate.theta, b.draw.estimate.theta_sd)
    x, z = bat.predicted_score(by=False), seq.predicted_score(by=False)
    assert (x.method, x.accuracy, x.low, x.high) == (z.method, z.accuracy, z.low, z.high)


@pytest.mark.slow
def test_batched_design_estimate_is_unbiased_with_its_variance_under_a_wrong_bank():
    """One fixed LLM whose answers come from other item parameters than the bank's (the model is
    wrong: it predicts every item far too low), 24 items drawn by design in batches of 6, each batch
    answered in a random order. Over 1500 sessions the design terms' mean (each draw's model weight
    tuned on the draws whose answers were in when it was made, not on the batch's own) is unbiased
    for the LLM's full-benchmark accuracy, and the mean of their variance estimate
    sum (D_t - A^)^2 / (n (n - 1)) is within 10% of the Monte-Carlo variance."""
    J, n, k, reps = 120, 24, 6, 1500
    bank = bank_2pl(J, 11)
    rng = np.random.default_rng(12)
    p = bank.params
    true_p = expit(p.a * 1.5 + p.b + 1.5)  # a much stronger LLM than the bank's prediction at any trait it reaches
    y = (rng.random(J) < true_p).astype(int)
    est, se2 = np.empty(reps), np.empty(reps)
    for r in range(reps):
        s = run_batches(bank, y, n, k, RandomisedSelection(), int(rng.integers(2**31)), order_rng=rng)
        terms = session_scoring.design_parts(s)["terms"][:, 0]
        assert terms.size == n
        est[r] = terms.mean()
        se2[r] = float(np.sum((terms - terms.mean()) ** 2)) / (n * (n - 1))
    truth = y.mean()
    mc_se = est.std() / math.sqrt(reps)
    print(f"batched design: bias {est.mean() - truth:+.5f} (MC SE {mc_se:.5f}); mean se^2 / MC var {se2.mean() / est.var():.3f}")
    assert abs(est.mean() - truth) < 3 * mc_se
    assert abs(se2.mean() / est.var() - 1) < 0.10


def test_a_batch_item_without_an_answer_leaves_the_estimate_of_the_other_items_unbiased():
    """A harness that has no answer for one item of each batch (chosen at random, so its answer
    is missing at random) excludes it; the batch's later draws still enter. Over 800 sessions the
    unprojected design estimate's error against the accuracy over the items each session did not
    exclude has mean 0 within 3 Monte-Carlo SEs."""
    from catengine.scoring.design import draw_weights

    J, n, k, reps = 120, 20, 6, 800
    bank = bank_2pl(J, 11)
    rng = np.random.default_rng(13)
    p = bank.params
    y = (rng.random(J) < expit(p.a * 1.5 + p.b + 1.5)).astype(int)  # the model is wrong, as above
    errors = np.empty(reps)
    for r in range(reps):
        s = CATSession(bank, selector=RandomisedSelection(), stopping=MaxItems(n), rng=int(rng.integers(2**31)))
        while not s.finished:
            batch = s.next_items(k)
            missing = batch[int(rng.integers(len(batch)))] if len(batch) > 1 else None  # the last batch is short
            for item in batch:
                if item == missing:
                    s.exclude(item)
                else:
                    s.record(item, int(y[bank.index_of(item)]))
        parts = session_scoring.design_parts(s)
        terms, size = parts["terms"][:, 0], int(parts["sizes"][0])
        assert terms.size == n and size == J - len(s._excluded)
        errors[r] = terms @ draw_weights(n, size) - np.delete(y, sorted(s._excluded)).mean()
    mc_se = errors.std() / math.sqrt(reps)
    assert abs(errors.mean()) < 3 * mc_se, (errors.mean(), mc_se)


def test_known_items_of_a_batch_draw_are_the_answers_before_it_and_its_earlier_slots():
    """The terms by hand: every D_t from the draw's context (the items remaining at it, its
    probabilities recomputed by the selector from the estimate it saw, the outcomes known at it)."""
    from catengine.scoring.model_based import expected_probabilities
    from catengine.selection import SelectionState

    J = 50
    bank = bank_2pl(J, 21)
    y = (np.random.default_rng(22).random(J) < 0.5).astype(int)
    sel = RandomisedSelection()
    s = run_batches(bank, y, 12, 4, sel, 23, order_rng=np.random.default_rng(24))
    parts = session_scoring.design_parts(s)
    h = s.history
    want = []
    for t, r in enumerate(h):
        ctx = r.draw
        known = [x.item for x in h[:ctx.answered]] + [bank.item_ids[j] for j in ctx.selected]
        remaining = np.ones(J, dtype=bool)
        remaining[[bank.index_of(i) for i in known]] = False
        f = expected_probabilities(bank.params, ctx.estimate.theta, ctx.estimate.theta_sd, sel.n_nodes)
        pi = sel.probabilities(bank.params, SelectionState(ctx.estimate, remaining, None, s.items), expected=f)
        j = bank.index_of(r.item)
        assert pi[j] == pytest.approx(r.criterion, rel=1e-12)
        d0 = sum(y[bank.index_of(i)] for i in known) + y[j] / pi[j]
        d1 = sum(y[bank.index_of(i)] for i in known) + f[remaining].sum() + (y[j] - f[j]) / pi[j]
        want.append((d0 / J, d1 / J))
    want = np.array(want)
    lam = parts["lam"]
    np.testing.assert_allclose(parts["terms"][:, 0], want[:, 0] + lam * (want[:, 1] - want[:, 0]), rtol=1e-10)


def test_a_resumed_half_answered_batch_keeps_its_draws(tmp_path):
    J = 60
    bank = bank_2pl(J, 31)
    y = (np.random.default_rng(32).random(J) < 0.6).astype(int)
    log = tmp_path / "s.jsonl"
    s = CATSession(bank, selector=DoublyRobustSelection(), stopping=MaxItems(20), rng=33, log=log, subject="llm")
    for _ in range(2):
        for item in s.next_items(5):
            s.record(item, int(y[bank.index_of(item)]))
    batch = s.next_items(5)
    for item in batch[2:]:  # answered out of order, two left pending
        s.record(item, int(y[bank.index_of(item)]))
    before = s.predicted_score(by=False)
    summary = s.state_summary()
    s.close()
    resumed = CATSession.resume(log, bank)
    again = resumed.state_summary()
    for key in summary:  # the history's and the pending batch's draw contexts among them
        same = np.array_equal(summary[key], again[key]) if isinstance(summary[key], np.ndarray) else summary[key] == again[key]
        assert same, key
    assert any(ctx is not None for _, _, ctx in again["batch"]) and any(r.draw for r in resumed.history)
    after = resumed.predicted_score(by=False)
    assert (after.method, after.n_design, after.accuracy, after.low, after.high) == (
        before.method, before.n_design, before.accuracy, before.low, before.high)
    for item in resumed.next_items(5):  # the two pending items of the batch
        resumed.record(item, int(y[bank.index_of(item)]))
    assert sum(r.design for r in resumed.history) == sum(r.design for r in s.history) + sum(
        item in {bank.item_ids[j] for j in summary_draws(summary)} for item in batch[:2])


def summary_draws(summary):
    return [j for j, _, ctx in summary["batch"] if ctx is not None]
