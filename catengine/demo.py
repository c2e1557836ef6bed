"""The demo job: an adaptive evaluation of a simulated new LLM against a LaRT bank, run by the
full engine (``CATSession``: MAP of (theta, tau) after every answer, the bank's default selection,
and by default ``catengine.stopping.default_stopping``: stop once the predicted full-benchmark
accuracy is known to within its stated half-width, or at its item cap). Pure computation: printing
is left to the caller.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from catengine.session import CATSession, draw_traits, simulate_answer
from catengine.session.session import calibration_cot_bound


@dataclass(frozen=True)
class DemoStep:
    step: int
    item: int
    item_id: str
    correct: int
    cot_tokens: float
    theta: float
    theta_sd: float
    tau: float
    tau_sd: float


def run_demo(bank, *, stopping=None, rng=None, on_step=None, selector=None, estimator=None, log=None):
    """Evaluate one simulated LLM adaptively. Returns (true (theta, tau), list of DemoStep, the session).

    The simulated LLM's traits are drawn from the bank's population; its answers and CoT lengths
    from the bank's LaRT model. ``rng`` seeds both the LLM and the session. ``stopping``,
    ``selector``, ``estimator``: as for ``CATSession`` (None: the session's defaults, e.g.
    ``default_stopping(bank.n_items)``).
    """
    if not bank.params.model.has_cot:
        raise ValueError(f"the demo needs a lart bank; {bank.source} is {bank.response_model}")
    rng = np.random.default_rng(rng)
    true_theta, true_tau = draw_traits(bank.params, rng)
    session = CATSession(bank, selector=selector, estimator=estimator, stopping=stopping, rng=rng,
                         subject="simulated-llm", log=log)
    steps = []
    offset = bank.effective_cot_offset
    # a simulated reply stops where the calibration LLMs' replies did: at the longest CoT the bank saw
    bound = calibration_cot_bound(bank)
    while not session.finished:
        item = session.next_item()
        j = bank.index_of(item)
        correct, tokens = simulate_answer(bank.params, j, true_theta, true_tau, rng, offset)
        if bound is not None and tokens is not None:
            tokens = min(tokens, bound[0])
        est = session.record(item, correct, tokens)
        steps.append(DemoStep(est.n_items, j, item, correct, tokens, est.theta, est.theta_sd, est.tau, est.tau_sd))
        if on_step is not None:
            on_step(steps[-1])
    session.close()
    return (true_theta, true_tau), steps, session
