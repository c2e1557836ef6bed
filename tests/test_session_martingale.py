"""The session's design draws, exactly: whatever item a draw picks, the term it adds averages to the truth.

The design estimate is unbiased because each draw's term D_t has conditional mean A (the LLM's
accuracy over the bank, and over each category) given everything before the draw (docs/math.md
§7.7). The tests of ``catengine.scoring.design`` check the formulas by enumeration; this one checks
the session's wiring of them on a deliberately wrong bank. At each step every item the design could
draw is drawn in turn (a copy of the session whose proposal is that item, at the probability the
design gives it), answered as the LLM would, and the terms the session then computes are averaged
with the design's probabilities. The average must be A to rounding at every step, for an LLM inside
the calibration population and for one beyond it; and the probability the session records for its
actual proposal must be the design's. It reaches into the session's pending proposal (private) to
make each item the drawn one.
"""

from __future__ import annotations

import copy
import warnings

import numpy as np
import pytest

from catengine import CATSession
from catengine.selection.base import SelectionState
from catengine.session.scoring import design_parts
from misspecified_worlds import J, world

STEPS = 5


def _parts_if_drawn(session, j, probability, y):
    """``design_parts(by="area")`` after the pending draw picks bank item ``j`` (probability
    ``probability``) and the LLM answers it; a first draw is followed by the next proposal, answered (an
    estimate needs two draws, and D_1 does not depend on the second)."""
    c = copy.deepcopy(session)
    c._pending = (int(j), float(probability))
    c.record(c.items.item_ids[j], int(y[j]))
    if len(c.history) == 1:
        nxt = c.next_item()
        c.record(nxt, int(y[c.bank.index_of(nxt)]))
    return design_parts(c, by="area")


@pytest.mark.parametrize("kind, seed, where", [("twofactor", 11, "beyond"), ("guess", 10, "inside")])
def test_every_draw_adds_terms_whose_design_mean_is_the_truth(kind, seed, where):
    bank, p, rng, strongest = world(kind, seed, categories=True)
    theta = strongest + 0.8 if where == "beyond" else 0.3
    y = (rng.random(J) < p(np.array(theta), np.array(-0.5))).astype(int)
    session = CATSession(bank, rng=7)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for step in range(STEPS):
            proposed = session.next_item()
            j0, recorded = session._pending
            state = SelectionState(session._estimate, session.eligible_mask(), session._responses, session.items,
                                   session._log_posterior)
            pi = session.selector.design.probabilities(session.params, state)
            assert pi[j0] == pytest.approx(recorded, rel=1e-12)
            assert pi.sum() == pytest.approx(1.0, abs=1e-12) and np.all(pi[session.eligible_mask()] > 0)
            mean, truth = 0.0, None
            for j in np.flatnonzero(pi > 0):
                parts = _parts_if_drawn(session, j, pi[j], y)
                mean = mean + pi[j] * parts["terms"][step]
                if truth is None:
                    codes = parts["codes"]
                    truth = np.array([y.mean()] + [y[codes == g].mean() for g in range(parts["labels"].size)])
            assert truth.size == 5  # the bank and its four categories
            np.testing.assert_allclose(mean, truth, rtol=0, atol=1e-12, err_msg=f"draw {step + 1}")
            session.record(proposed, int(y[session.bank.index_of(proposed)]))
