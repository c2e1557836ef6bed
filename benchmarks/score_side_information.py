"""Does anything besides the answers help predict the full-benchmark score? CoT lengths and the
calibration LLMs themselves, on MATH500 with whole LLMs held out (issue 14, docs/score_prediction.md §5).

``python benchmarks/score_side_information.py [--seeds 14,1,2,3,4,5,6,7,15,16] [--length-factors 1,3]``

For each seed, MATH500's 158 runs of 79 LLMs are split into 5 folds by LLM (the split
``score_factor_choices.py`` uses). Two score factors are fitted on the training folds and every
held-out run's recorded answers are replayed for 50 items chosen by D-optimal design in the
factors (as the default selector chooses). After 10 / 25 / 50 items its full-benchmark accuracy
is predicted five ways, from the same items:

* ``default``: the plug-in at the factor posterior's mode (``predict_accuracy_factors``), N(0, I) prior;
* ``cot-k``: the same plug-in, but the factor prior is conditioned on the LLM's CoT lengths. A
  length model fitted on the training runs, log(T_ij + 1) = m_j + c_j y_ij + l_j . xi_i + e_ij
  (k length factors xi after item means that differ between right and wrong answers, so that a
  length counts only for what it says beyond the answer's correctness), gives each held-out run a
  Gaussian posterior for xi from its recorded lengths; the training runs' joint covariance of
  (eta, xi) turns it into a Normal prior for the score factors eta;
* ``neighbours-model``: a discrete prior on the training runs' fitted factors (each weighted by
  the likelihood of the held-out answers under its fitted probabilities), predicting the rest
  with those probabilities;
* ``neighbours-answers``: the same weights, predicting the rest with the training runs' actual
  answers (so the residual structure of similar LLMs, which no factor model carries, is used);
* ``default+neighbours``: the average of ``default`` and ``neighbours-answers``.

Printed: MAE divided by the exact expected MAE of the mean of k random items (per LLM), per seed
and averaged over the seeds with their range.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from scipy.special import expit, logsumexp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

LENGTHS = (10, 25, 50)
LENGTH_MODEL_SWEEPS = 30


def fit_length_model(correct, log_length, k):
    """Alternating least squares for log_length = m_j + c_j y_ij + l_j . xi_i + e_ij on the training
    runs: returns (m, c, l (J, k), residual variances (J,), xi (N, k) with unit variance)."""
    N, J = correct.shape
    xi = np.zeros((N, k))
    load = np.zeros((J, k))
    design_y = correct - correct.mean(axis=0)
    for _ in range(LENGTH_MODEL_SWEEPS):
        target = log_length - xi @ load.T
        centred = target - target.mean(axis=0)
        denom = np.sum(design_y * design_y, axis=0)
        c = np.where(denom > 0, np.sum(design_y * centred, axis=0) / np.where(denom > 0, denom, 1.0), 0.0)
        m = target.mean(axis=0) - c * correct.mean(axis=0)
        resid = log_length - m - c * correct
        u, s, vt = np.linalg.svd(resid, full_matrices=False)
        xi = u[:, :k] * np.sqrt(N)
        load = vt[:k].T * s[:k] / np.sqrt(N)
    resid = log_length - m - c * correct - xi @ load.T
    return m, c, load, resid.var(axis=0) + 1e-3, xi


def length_factor_posterior(model, items, answers, log_lengths, prior_cov):
    """Gaussian posterior (mean, covariance) of one run's length factors from its recorded lengths."""
    m, c, load, var, _ = model
    resid = log_lengths - m[items] - c[items] * answers
    weighted = load[items] / var[items][:, None]
    cov = np.linalg.inv(load[items].T @ weighted + np.linalg.inv(prior_cov))
    return cov @ (weighted.T @ resid), cov


def factor_mode(loadings, intercepts, answers, prior_mean, prior_precision, start):
    """Mode of the factor posterior under a Normal(prior_mean, prior_precision^-1) prior (Newton)."""
    eta = np.array(start, dtype=float)
    for _ in range(100):
        p = expit(loadings @ eta + intercepts)
        grad = loadings.T @ (answers - p) - prior_precision @ (eta - prior_mean)
        hess = (loadings * (p * (1.0 - p))[:, None]).T @ loadings + prior_precision
        step = np.linalg.solve(hess, grad)
        eta = eta + step
        if np.max(np.abs(step)) < 1e-9:
            break
    return eta


def main(argv=None) -> int:
    from score_factor_choices import fold_splits, print_method_table, record_seed_ratios
    from score_prediction import load

    from calibration.heldout import fit_score_factors
    from catengine.models.score_factors import ScoreFactors
    from catengine.scoring import predict_accuracy_factors, random_mean_mae

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="14,1,2,3,4,5,6,7,15,16")
    ap.add_argument("--length-factors", default="1,3", help="numbers of length factors for the cot-k rows")
    ap.add_argument("--folds", type=int, default=5)
    args = ap.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    ks = [int(k) for k in args.length_factors.split(",")]
    methods = ["default"] + [f"cot-{k}" for k in ks] + ["neighbours-model", "neighbours-answers", "default+neighbours"]
    t0 = time.perf_counter()
    data = load("math500")
    Y = data.correct.astype(float)
    log_t = np.log(data.cot_length.astype(float) + 1.0)
    N, J = Y.shape
    ratio = {}
    for seed in seeds:
        err = {(k, m): [] for k in LENGTHS for m in methods}
        base = {k: [] for k in LENGTHS}
        for test, train in fold_splits(data.llm_groups, N, args.folds, seed):
            fit = fit_score_factors(data.correct[train], 2)
            G, h = fit.loadings, fit.intercepts
            factors = ScoreFactors(G, h)
            fitted_p = expit(fit.traits @ G.T + h)
            conditionals = {}
            for k in ks:
                model = fit_length_model(Y[train], log_t[train], k)
                joint = np.cov(np.c_[fit.traits, model[4]].T)
                c_ee, c_ex, c_xx = joint[:2, :2], joint[:2, 2:], joint[2:, 2:]
                slope = c_ex @ np.linalg.inv(c_xx)
                conditionals[k] = (model, c_xx, slope, c_ee - slope @ c_ex.T)
            for i in test:
                truth = float(Y[i].mean())
                for k in LENGTHS:
                    base[k].append(random_mean_mae(truth, J, k))
                chosen: list[int] = []
                eligible = np.ones(J, dtype=bool)
                mode = None
                for step in range(1, max(LENGTHS) + 1):
                    idx = np.asarray(chosen, dtype=np.int64)
                    mode, cov = factors.posterior(idx, Y[i, idx], start=mode)
                    j = int(factors.best_d_optimal(mode, cov, eligible, 1)[0][0])
                    chosen.append(j)
                    eligible[j] = False
                    if step not in LENGTHS:
                        continue
                    idx = np.asarray(chosen, dtype=np.int64)
                    rest = np.flatnonzero(eligible)
                    y_obs = Y[i, idx]
                    known = y_obs.sum()
                    pred = {"default": predict_accuracy_factors(factors, idx, y_obs, intervals=False)[0].mean / J}
                    start, _ = factors.posterior(idx, y_obs, start=mode)
                    for k, (model, c_xx, slope, resid_cov) in conditionals.items():
                        xi_mean, xi_cov = length_factor_posterior(model, idx, y_obs, log_t[i, idx], c_xx)
                        prior_cov = resid_cov + slope @ xi_cov @ slope.T
                        eta = factor_mode(G[idx], h[idx], y_obs, slope @ xi_mean, np.linalg.inv(prior_cov), start)
                        pred[f"cot-{k}"] = (known + expit(G[rest] @ eta + h[rest]).sum()) / J
                    loglik = (y_obs * np.log(fitted_p[:, idx]) + (1.0 - y_obs) * np.log1p(-fitted_p[:, idx])).sum(axis=1)
                    w = np.exp(loglik - logsumexp(loglik))
                    pred["neighbours-model"] = (known + w @ fitted_p[:, rest].sum(axis=1)) / J
                    pred["neighbours-answers"] = (known + w @ Y[train][:, rest].sum(axis=1)) / J
                    pred["default+neighbours"] = 0.5 * (pred["default"] + pred["neighbours-answers"])
                    for name, value in pred.items():
                        err[(step, name)].append(abs(value - truth))
        record_seed_ratios(ratio, seed, err, base, methods)
    print_method_table(ratio, methods, seeds, LENGTHS, f"two score factors, D-optimal items, {args.folds} folds by LLM",
                       t0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
