"""Simulated examinees for engine-side procedures (Sympson-Hetter calibration, demos).

``catengine`` never imports the offline ``calibration`` package; the draws come from the bank's
response model object (``params.model.draw_tau`` and ``params.model.simulate``, the draw
``calibration.simulate`` makes too).
"""

from __future__ import annotations

import numpy as np

from catengine.models import lart
from catengine.selection.exposure import SympsonHetter
from catengine.session.session import MAX_COT_TOKENS
from catengine.validation import is_integer


def draw_traits(params, rng) -> tuple[float, float | None]:
    """(theta, tau) from the bank's population: standard normal, correlation rho with tau for a
    model with a CoT part (tau None otherwise)."""
    rng = np.random.default_rng(rng)
    theta = float(rng.standard_normal())
    tau = params.model.draw_tau(params, theta, rng)
    return theta, None if tau is None else float(tau)


def simulate_answer(params, item: int, theta: float, tau: float | None, rng, cot_offset: float = 1.0):
    """(correct, CoT tokens or None) of a simulated subject with traits (theta, tau) on one item."""
    draw = params.model.simulate(params, [theta], None if tau is None else [tau], rng, items=[item])
    correct = int(draw.correct[0, 0])
    if draw.log_cot is None:
        return correct, None
    # within the engine's plausible range (a far tail of the lognormal would otherwise exceed it)
    return correct, float(min(lart.cot_tokens(draw.log_cot[0, 0], cot_offset, whole_tokens=True), MAX_COT_TOKENS))


def calibrate_sympson_hetter(bank, *, target_rate: float = 0.25, selector=None, estimator=None, stopping=None,
                             n_simulees: int = 300, n_iter: int = 8, rng=None, progress: bool = False) -> SympsonHetter:
    """Sympson-Hetter control parameters by simulation (Sympson & Hetter 1985).

    Each iteration runs ``n_simulees`` simulated subjects from the bank's population through the
    classic procedure with the current K (the selected item is administered with probability K_j,
    otherwise blocked for that subject and the next best is selected), counts how often each item
    was *selected*, P(S_j), and sets K_j = min(1, target_rate / P(S_j)). Returns the final
    :class:`SympsonHetter` (store it with ``SympsonHetter.save``).
    """
    from catengine.session.session import CATSession

    if not 0 < target_rate <= 1:
        raise ValueError(f"target_rate must lie in (0, 1], got {target_rate!r}")
    if not is_integer(n_simulees) or n_simulees < 1:
        raise ValueError(f"n_simulees must be a positive integer, got {n_simulees!r}")
    if not is_integer(n_iter) or n_iter < 1:
        raise ValueError(f"n_iter must be a positive integer, got {n_iter!r}")
    rng = np.random.default_rng(rng)
    params = bank.params
    J = params.n_items
    K = np.ones(J)
    offset = bank.effective_cot_offset
    iterator = range(n_iter)
    if progress:
        from tqdm.auto import tqdm

        iterator = tqdm(iterator, desc="Sympson-Hetter")
    for _ in iterator:
        selected = np.zeros(J)
        for _ in range(n_simulees):
            theta, tau = draw_traits(params, rng)
            s = CATSession(bank, selector=selector, estimator=estimator, stopping=stopping, rng=rng)
            while not s.finished:
                item = s.next_item()
                j = bank.index_of(item)
                selected[j] += 1
                if rng.random() < K[j]:
                    correct, cot = simulate_answer(params, j, theta, tau, rng, offset)
                    s.record(item, correct, cot)
                else:
                    s.exclude(item)
        p_sel = selected / n_simulees
        K = np.where(p_sel > target_rate, target_rate / np.maximum(p_sel, 1e-300), 1.0)
    return SympsonHetter(control=tuple(float(v) for v in K), target_rate=float(target_rate))
