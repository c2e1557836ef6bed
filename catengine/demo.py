"""The demo job: an adaptive evaluation of a simulated new LLM against a LaRT bank.

A deliberately small loop (MAP of (theta, tau) by Newton after every answer, next item by the
theta-targeted criterion on the 2 x 2 precision, stop when the posterior SD of theta is small);
the full engine lives in ``catengine.session``. Pure computation: printing is left to the caller.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from catengine.models import lart
from catengine.models.params import ItemParams


@dataclass(frozen=True)
class DemoStep:
    step: int
    item: int
    correct: int
    cot_tokens: float
    theta: float
    theta_sd: float
    tau: float
    tau_sd: float


def simulate_llm_answer(params: ItemParams, item: int, theta: float, tau: float, cot_offset: float, rng) -> tuple[int, float]:
    """One simulated answer and CoT length (tokens) of an LLM with traits (theta, tau)."""
    p = float(lart.prob_correct(params, theta, [item])[0])
    correct = int(rng.random() < p)
    log_t = params.omega[item] - params.phi[item] * tau + params.lam[item] * rng.standard_normal()
    return correct, float(max(np.round(np.exp(log_t) - cot_offset), 0.0))


def map_traits(params: ItemParams, items, responses, log_cot, start=(0.0, 0.0), max_iter: int = 50):
    """MAP of (theta, tau) under the bank's bivariate normal prior; returns (xi, covariance)."""
    rho = params.rho
    prior_precision = np.array([[1.0, -rho], [-rho, 1.0]]) / (1.0 - rho * rho)

    def objective(xi):
        ll, g, h = lart.trait_derivatives(params, xi[0], xi[1], responses, log_cot, items)
        return ll - 0.5 * xi @ prior_precision @ xi, g - prior_precision @ xi, h - prior_precision

    xi = np.asarray(start, dtype=float)
    f, g, h = objective(xi)
    for _ in range(max_iter):
        step = np.linalg.solve(-h, g)
        t = 1.0
        while True:  # backtracking keeps every Newton step an ascent step (the target is concave)
            candidate = xi + t * step
            f_new, g_new, h_new = objective(candidate)
            if f_new >= f - 1e-12 or t < 1e-8:
                break
            t *= 0.5
        xi, f, g, h = candidate, f_new, g_new, h_new
        if np.max(np.abs(t * step)) < 1e-9:
            break
    return xi, np.linalg.inv(-h)


def run_demo(params: ItemParams, *, cot_offset: float = 1.0, target_sd: float = 0.25, max_items: int = 50,
             min_items: int = 5, rng=None, on_step=None):
    """Evaluate one simulated LLM adaptively. Returns (true (theta, tau), list of DemoStep)."""
    rng = np.random.default_rng(rng)
    cov = np.array([[1.0, params.rho], [params.rho, 1.0]])
    true_theta, true_tau = rng.multivariate_normal([0.0, 0.0], cov)
    administered: list[int] = []
    answers: list[int] = []
    log_cot: list[float] = []
    xi, post_cov = np.zeros(2), cov
    available = np.ones(params.n_items, dtype=bool)
    steps = []
    v = (params.phi / params.lam) ** 2
    while len(administered) < min(max_items, params.n_items):
        precision = np.linalg.inv(post_cov)
        u, _ = lart.item_information(params, xi[0])
        det = (precision[0, 0] + u) * (precision[1, 1] + v) - precision[0, 1] ** 2
        theta_var_after = np.where(available, (precision[1, 1] + v) / det, np.inf)
        item = int(np.argmin(theta_var_after))
        correct, tokens = simulate_llm_answer(params, item, true_theta, true_tau, cot_offset, rng)
        available[item] = False
        administered.append(item)
        answers.append(correct)
        log_cot.append(float(lart.log_cot_length(tokens, cot_offset)))
        xi, post_cov = map_traits(params, np.array(administered), np.array(answers), np.array(log_cot), start=xi)
        sd = np.sqrt(np.diag(post_cov))
        steps.append(DemoStep(len(administered), item, correct, tokens, xi[0], sd[0], xi[1], sd[1]))
        if on_step is not None:
            on_step(steps[-1])
        if len(administered) >= min_items and sd[0] <= target_sd:
            break
    return (float(true_theta), float(true_tau)), steps
