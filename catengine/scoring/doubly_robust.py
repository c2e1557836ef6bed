"""The default full-benchmark score: the design-based estimate with the model as its control variate
(augmented inverse-probability weighting, AIPW: doubly robust in that it is unbiased under the
known design whatever the model gets wrong, and efficient where the model is right; docs/math.md
§7.8). Pure numpy: no session, no I/O.

Each design draw t gives two terms (``catengine.scoring.design``): D_t(0), the Horvitz-Thompson
term without any model, and D_t(1), the term with the model's predictions f_t of the items still
unknown. D_t(lam) = D_t(0) + lam (D_t(1) - D_t(0)) uses the predictions lam f_t, and

    E[D_t(lam_t) | past] = A       for every lam_t fixed by the past of draw t,

A the full-benchmark accuracy. The default estimate is their mean, A^ = (1/n) sum_t D_t(lam_t),
with lam_t the power-tuned weight (PPI++, Angelopoulos et al. 2023) of the draws known before draw
t (:func:`~catengine.scoring.design.predictable_power_tuning`): exactly unbiased, where one lam
tuned on every draw, its own included, adds a bias of order 1/n and an empirical variance that is
too small by as much. The model enters only through f_t (and the design's probabilities, which
favour the items whose answer it finds uncertain): a model that is wrong costs precision, never
bias, and a confident model cannot hold the score where the draws disagree with it.

Its variance and interval are those of ``catengine.scoring.design.design_estimate``; its standing
among the calibration LLMs is ``catengine.scoring.standing``.
"""

from __future__ import annotations

import numpy as np

from catengine.scoring.design import predictable_power_tuning

__all__ = ["aipw_terms", "known_before"]


def known_before(done, answered) -> np.ndarray:
    """(n, n) bool: [t, s] True when draw s's term was determined before draw t was made.

    ``done`` (n,): per draw, the number of answers after which its term is determined (its own
    answer's position in the answer order plus one, or that of the last item drawn before it in
    its batch if later); ``answered`` (n,): per draw, the answers known when it was made. In a
    sequential session draw t knows exactly the draws before it."""
    done = np.asarray(done, dtype=np.int64).reshape(-1)
    answered = np.asarray(answered, dtype=np.int64).reshape(-1)
    if done.shape != answered.shape:
        raise ValueError("done and answered must hold one value per draw each")
    return done[None, :] <= answered[:, None]


def aipw_terms(terms_without, terms_with, known=None, opening: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """(terms, lam): the D_t(lam_t) per draw and group, (n, G), and the weights lam_t (n,), tuned on
    the bank's column (column 0) of the draws known before each (``known``: :func:`known_before`;
    default: every earlier draw), and shared by the groups (categories) of the draw; ``opening``:
    lam_t until three draws are known (``predictable_power_tuning``)."""
    a = np.asarray(terms_without, dtype=np.float64)
    b = np.asarray(terms_with, dtype=np.float64)
    if a.ndim != 2 or a.shape != b.shape:
        raise ValueError(f"terms_without and terms_with must be (n_draws, groups) arrays of one shape, got {a.shape}, {b.shape}")
    lam = predictable_power_tuning(a[:, 0], b[:, 0], known, opening)
    return a + lam[:, None] * (b - a), lam
