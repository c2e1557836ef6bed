"""Where the error of the predicted full-benchmark accuracy comes from (issue 14, docs/score_prediction.md §5).

``python benchmarks/score_error_sources.py [--k 25] [--folds 5] [--seed 14]``

MATH500 (158 LLMs x 500 items), cross-fitted over LLM folds: each fold's 2PL bank is fitted by
``CBMMCalibrator`` on the other folds (no interval check: only the point prediction is studied).
Every held-out LLM is replayed for k items and its full-benchmark accuracy A (the mean of all its
answers) is predicted in several ways. Printed: the
MAE of each, its mean signed error, and its ratio to the MAE of the mean of k random items (the
random mean's MAE is its exact expectation over all k-item draws, ``catengine.scoring.random_mean_mae``).

* ``score factors``     the library default: the fold bank with its score factors (``attach_score_factors``,
                        d chosen by cross-validation on the training folds), D-optimal selection in them,
                        ``predicted_score()`` (the plug-in at the factor posterior's mode);
* ``score factors, mean`` the same sessions, the posterior mean over the factor posterior
                        (``predict_accuracy_factors(..., centre="mean")``);
* ``factors known``     the same answered items, the rest by the factors at the LLM's full-benchmark
                        factor mode (from all 500 answers): what is left when the factors are known.
                        Printed last: the shares of the default's mean squared error that the factor
                        posterior's own variance (gradient' Cov gradient of the unanswered total) and
                        the unanswered items' Bernoulli variance account for;
* ``one trait``         the one-trait path (the default before score factors): maximum information, the
                        answered items plus sum_U P_j(theta_k) for the rest (theta_k: the session's MAP);
  The rows below all use the one-trait path's sessions or bank:

* ``theta known``       the same answered items, the rest at theta_full (the MAP from all 500 answers):
                        what is left when the trait is known -- the model's own misfit;
* ``model at theta_full`` every item at theta_full, no answer used;
* ``posterior mean``    E_q[A(theta)] over a grid posterior from the k answers, N(0, 1) prior;
* ``empirical prior``   the same with the calibration LLMs' theta_full as a kernel prior (bandwidth 0.25);
* ``score-targeted``    items chosen one by one to minimise the expected posterior variance of A
                        (grid posterior, N(0, 1) prior; the trait term and the unanswered items'
                        Bernoulli term), scored by the posterior mean.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from _paths import lart_files  # noqa: E402

GRID = np.linspace(-5.0, 5.0, 201)


def posterior_weights(log_post):
    w = np.exp(log_post - log_post.max())
    return w / w.sum()


def score_targeted_items(P, y, k):
    """Greedy: the item whose answer minimises E[Var(A | answers, y_j)] (grid posterior, N(0, 1) prior)."""
    J = P.shape[1]
    log_post = -0.5 * GRID**2
    answered = np.zeros(J, dtype=bool)
    for _ in range(k):
        w = posterior_weights(log_post)
        cand = np.flatnonzero(~answered)
        rest = P[:, ~answered]
        unanswered_sum = rest.sum(axis=1)[:, None] - P[:, cand]  # (G, C): sum over U \ {j}
        bern = (rest * (1 - rest)).sum(axis=1)[:, None] - P[:, cand] * (1 - P[:, cand])
        expected = np.zeros(cand.size)
        for weight in (w[:, None] * P[:, cand], w[:, None] * (1 - P[:, cand])):  # y_j = 1, y_j = 0
            z = weight.sum(axis=0)
            m = (weight * unanswered_sum).sum(axis=0) / z
            v = (weight * unanswered_sum**2).sum(axis=0) / z - m**2
            expected += z * (v + (weight * bern).sum(axis=0) / z)
        j = int(cand[np.argmin(expected)])
        answered[j] = True
        log_post = log_post + (np.log(P[:, j]) if y[j] else np.log1p(-P[:, j]))
    return answered, log_post


def main(argv=None) -> int:
    from catengine.scoring import random_mean_mae

    from calibration import CBMMCalibrator, load_responses
    from calibration.heldout import attach_score_factors, llm_folds, with_llm_groups
    from catengine.scoring import predict_accuracy_factors
    from catengine import CATSession
    from catengine.models.information import prob_correct
    from catengine.stopping import MaxItems

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--k", type=int, default=25)
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--seed", type=int, default=14)
    ap.add_argument("--ungrouped", action="store_true", help="split runs, not LLMs (a run's sibling may calibrate its bank)")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    t0 = time.perf_counter()
    accuracy, cot = lart_files("math500")
    data = load_responses(accuracy, cot=cot)
    if not args.ungrouped:
        data = with_llm_groups(data)[0]  # both prompt runs of an LLM are held out together, as the checks do
    N, J, k = data.n_subjects, data.n_items, args.k
    fold_rows = llm_folds(data.llm_groups, args.folds, args.seed)
    names = ("score factors", "score factors, mean", "factors known", "one trait", "theta known", "model at theta_full",
             "posterior mean", "empirical prior", "score-targeted")
    shares = {"trait": [], "bernoulli": []}  # the factor posterior's own variance terms of the prediction, per LLM
    err = {name: [] for name in names}  # signed errors, one per LLM
    random_mae = []  # the random mean's exact expected MAE, one per LLM
    for f in range(args.folds):
        test, train = fold_rows[f], np.setdiff1d(np.arange(N), fold_rows[f])
        train_data = data.subset(subjects=train)
        bank = CBMMCalibrator(rng=1, progress=False).fit(train_data).to_item_bank("f", interval_check=False)
        factor_bank = attach_score_factors(bank, train_data, rng=1)
        params, ids = bank.params, list(bank.item_ids)
        P = np.array([prob_correct(params, t) for t in GRID])  # (G, J)
        full = lambda i: CATSession(bank).estimate_from(ids, data.correct[i].astype(int)).theta  # noqa: E731
        d = (GRID[:, None] - np.array([full(i) for i in train])[None, :]) / 0.25
        log_emp = np.log(np.mean(np.exp(-0.5 * d * d), axis=1) + 1e-300)
        for i in test:
            y = data.correct[i].astype(float)
            truth = y.mean()
            s = CATSession(bank, stopping=MaxItems(k), rng=0)
            for _ in range(k):
                item = s.next_item()
                s.record(item, int(y[bank.index_of(item)]))
            answered = np.zeros(J, dtype=bool)
            answered[[bank.index_of(r.item) for r in s.history]] = True
            obs = y[answered].sum()
            p_k, p_full = prob_correct(params, s.estimate.theta), prob_correct(params, full(i))
            err["one trait"].append((obs + p_k[~answered].sum()) / J - truth)
            sf = CATSession(factor_bank, stopping=MaxItems(k), rng=0)
            for _ in range(k):
                item = sf.next_item()
                sf.record(item, int(y[factor_bank.index_of(item)]))
            err["score factors"].append(sf.predicted_score(by=False).accuracy - truth)
            seen = np.array([factor_bank.index_of(r.item) for r in sf.history])
            mean = predict_accuracy_factors(factor_bank.score_factors, seen, y[seen], intervals=False, centre="mean")[0]
            err["score factors, mean"].append(mean.mean / J - truth)
            fac = factor_bank.score_factors
            unseen = np.ones(J, dtype=bool)
            unseen[seen] = False
            mode, cov = fac.posterior(seen, y[seen])
            p = fac.probabilities(mode[None, :])[0]
            w = p * (1.0 - p)
            grad = (w[unseen, None] * fac.loadings[unseen]).sum(axis=0)  # d(total of the unanswered) / d(eta)
            shares["trait"].append(float(grad @ cov @ grad) / J**2)
            shares["bernoulli"].append(float(w[unseen].sum()) / J**2)
            eta_full = fac.posterior(np.arange(J), y)[0]
            err["factors known"].append((y[seen].sum() + fac.probabilities(eta_full[None, :])[0][unseen].sum()) / J - truth)
            err["theta known"].append((obs + p_full[~answered].sum()) / J - truth)
            err["model at theta_full"].append(p_full.mean() - truth)
            loglik = (np.log(P[:, answered]) * y[answered] + np.log1p(-P[:, answered]) * (1 - y[answered])).sum(axis=1)
            A = (obs + P[:, ~answered].sum(axis=1)) / J
            err["posterior mean"].append(float(posterior_weights(loglik - 0.5 * GRID**2) @ A) - truth)
            err["empirical prior"].append(float(posterior_weights(loglik + log_emp) @ A) - truth)
            chosen, log_post = score_targeted_items(P, y, k)
            A_t = (y[chosen].sum() + P[:, ~chosen].sum(axis=1)) / J
            err["score-targeted"].append(float(posterior_weights(log_post) @ A_t) - truth)
            random_mae.append(random_mean_mae(truth, J, k))
        print(f"fold {f + 1}/{args.folds}: bank from {train.size} LLMs ({factor_bank.score_factors.dims} score factors), "
              f"{test.size} replayed", flush=True)
    base = float(np.mean(random_mae))
    print(f"\nMATH500, {N} held-out LLMs (cross-fitted, cBMM banks), k = {k} items, {time.perf_counter() - t0:.0f} s")
    print(f"{'prediction':22s} {'MAE':>7s} {'bias':>8s} {'xrand':>6s}")
    print(f"{'random mean (exact)':22s} {base:7.4f} {'':>8s} {1.0:6.2f}")
    for name in names:
        e = np.asarray(err[name])
        print(f"{name:22s} {np.mean(np.abs(e)):7.4f} {np.mean(e):+8.4f} {np.mean(np.abs(e)) / base:6.2f}")
    mse = float(np.mean(np.square(err["score factors"])))
    trait, bern = float(np.mean(shares["trait"])), float(np.mean(shares["bernoulli"]))
    print(f"score factors' mean squared error {mse:.6f}: the factor posterior's own variance of the prediction "
          f"{100 * trait / mse:.0f}%, the unanswered items' Bernoulli variance {100 * bern / mse:.0f}%, "
          f"beyond the model {100 * (1 - (trait + bern) / mse):.0f}%")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
