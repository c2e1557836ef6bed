"""The default score under deliberately wrong banks: bias, variance and coverage by simulation.

``python benchmarks/score_misspecification.py [--reps 2000] [--lengths 10,25,50] [--variance-rules]
[--categories 400] [--flag-seeds 0,1,2,3] [--flag-margins 0,0.25,0.5,1] [--flag-alternatives]``

The larger run behind ``tests/test_score_misspecification.py`` (same worlds, same seeds for the
banks and LLMs). Banks are fitted as 2PL by cBMM (every default but the interval check, the
calibration responses kept) on 150 calibration LLMs x 200 items whose answers come from models a
2PL cannot represent:

* ``guess``: guessing floors and ceilings, P = c + (d - c) logistic(a theta + b), c ~ U(0.15, 0.3),
  d ~ U(0.85, 1);
* ``twofactor``: a second, independent ability, P = logistic(a theta + g eta + b);
* ``shuffled``: the ``guess`` answers with the items' columns shuffled before fitting (every item of
  the bank carries another item's parameters).

For one LLM inside the calibration population and one stronger than every calibration LLM, default
sessions (``CATSession(bank)``) are replayed ``--reps`` times against the LLM's fixed answers (the
design draws are the only randomness, so the target is its own full-benchmark accuracy; ``--reps 0``
skips these runs). Printed per world, LLM and length: the reported estimate's bias in Monte-Carlo SEs, and that of the unprojected
estimate A^ = sum_t w_t D_t (the reported one is A^ projected onto the attainable range, which moves
it only when a surprising draw pushed it outside; docs/math.md §7.7), the martingale variance
estimate sum_t w_t^2 (D_t - A^)^2 / (1 - sum_t w_t^2) over the Monte-Carlo variance of A^, the
reported variance (the pooled one) over that of the reported estimate, the 95% interval's coverage,
the MAE over that of the mean of as many random items, and the model-only prediction's bias.
``--variance-rules`` adds two coverages: of the same estimate with the draws' own variance alone
(the martingale estimate and its Student-t quantile, no model figure pooled in), and of the
estimate plus or minus 1.96 Monte-Carlo SDs (an oracle: the spread no session knows).
``--categories N``: the same worlds with the items in categories of 15 / 35 / 60 / 90 items (the
bank's field "area"), N sessions per LLM, and the coverage of each category's interval.

Then the extrapolation flag (``catengine.scoring.standing``): 400 simulated LLMs x 300 items per
world and seed; a bank from the LLMs below the 60th accuracy percentile replays those above the
85th (the share of the LLMs beyond the calibration maximum that are flagged), and a bank from a
random 60% replays the rest (the share of those inside the middle 80% of the calibration accuracies
that are flagged), one default test each, for the guessing and two-factor worlds; beside it the
rule that ranks the trait estimate among the calibration traits, and the rule that ranks the
answer percentile (beyond the calibration runs' 5th / 95th percentiles). ``--flag-margins``: the
same replays' band evidence read with other margins (the trade-off between the two shares).
``--flag-alternatives``: beside it, two classifiers of the same answers that use a model, each firing when its posterior probability that the LLM lies beyond
the calibration LLMs' 5th / 95th percentile exceeds 0.1, 0.3 or 0.5: the one that knows the
simulated world (its true item response functions and population, a bound no real bank reaches),
and the bank's own 2PL with a flat prior on the trait (the trait against the calibration traits'
percentiles).
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from _paths import test_support  # noqa: E402

_worlds = test_support("misspecified_worlds")
J, N_CALIBRATION, WORLDS = _worlds.J, _worlds.N_CALIBRATION, _worlds.WORLDS
truth_model, fitted_bank, world = _worlds.truth_model, _worlds.fitted_bank, _worlds.world


def score_runs(reps, lengths, variance_rules=False):
    from statistics import NormalDist

    from catengine import CATSession
    from catengine.scoring import random_mean_mae
    from catengine.scoring.design import design_estimate, draw_weights
    from catengine.session.scoring import design_parts
    from catengine.stopping import MaxItems

    z95 = NormalDist().inv_cdf(0.975)
    print(f"{'world':9s} {'LLM':6s} {'acc':>5s} {'k':>3s} {'bias/MCSE':>9s} {'A^ bias':>8s} {'se2/MC':>7s} {'rep/MC':>7s} "
          f"{'cover':>6s} {'MAE x rand':>10s} {'model bias':>10s}"
          + (f" {'draws alone':>11s} {'MC SD':>6s}" if variance_rules else ""))
    for w, kind in enumerate(WORLDS):
        t0 = time.perf_counter()
        bank, p, rng, strongest = world(kind, 10 + w)
        for where, theta in (("inside", 0.3), ("beyond", strongest + 0.8)):
            y = (rng.random(J) < p(np.array(theta), np.array(-0.5))).astype(int)
            truth = float(y.mean())
            rows = {k: [] for k in lengths}
            for r in range(reps):
                s = CATSession(bank, stopping=MaxItems(max(lengths)), rng=[w, r])
                while not s.finished:
                    item = s.next_item()
                    s.record(item, int(y[bank.index_of(item)]))
                    n = len(s.history)
                    if n in rows:
                        score = s.predicted_score(by=False)
                        model = s.predicted_score(method="model", by=False)
                        terms = design_parts(s, by=False)["terms"][:, 0]
                        weights = draw_weights(terms.size, J)
                        raw = float(terms @ weights)
                        row = [score.accuracy, score.low, score.high, score.sd ** 2,
                               np.sum(weights**2 * (terms - raw) ** 2) / (1 - np.sum(weights**2)), model.accuracy, raw]
                        if variance_rules:  # the same estimate with the draws' own variance alone (no model figure)
                            known = float(sum(r.correct for r in s.history))
                            alone = design_estimate(terms * J, n_items=J, bounds=(known, known + J - n), weights=weights)
                            row += [alone.low / J, alone.high / J]
                        rows[n].append(row)
            for k, v in rows.items():
                a = np.array(v)
                est, low, high, rep, se2, model, raw = a[:, :7].T
                mc = est.var(ddof=1)
                line = (f"{kind:9s} {where:6s} {truth:5.3f} {k:3d} {(est.mean() - truth) / math.sqrt(mc / est.size):+9.2f} "
                        f"{(raw.mean() - truth) / math.sqrt(raw.var(ddof=1) / raw.size):+8.2f} {se2.mean() / raw.var(ddof=1):7.3f} {rep.mean() / mc:7.3f} {np.mean((low <= truth) & (truth <= high)):6.3f} "
                        f"{np.mean(np.abs(est - truth)) / random_mean_mae(truth, J, k):10.2f} {model.mean() - truth:+10.3f}")
                if variance_rules:
                    alone_low, alone_high = a[:, 7], a[:, 8]
                    line += (f" {np.mean((alone_low <= truth) & (truth <= alone_high)):11.3f}"
                             f" {np.mean(np.abs(est - truth) <= z95 * math.sqrt(mc)):6.3f}")
                print(line)
        print(f"  ({kind}: {time.perf_counter() - t0:.0f} s)", flush=True)


def category_runs(reps, lengths):
    """The intervals of each category's score (``predicted_score(by="area")``): items in categories
    of 15 / 35 / 60 / 90 items, the same LLMs and sessions as :func:`score_runs`."""
    from catengine import CATSession
    from catengine.stopping import MaxItems

    for w, kind in enumerate(WORLDS):
        bank, p, rng, strongest = world(kind, 10 + w, categories=True)
        area = bank.item_metadata("area")
        for where, theta in (("inside", 0.3), ("beyond", strongest + 0.8)):
            y = (rng.random(J) < p(np.array(theta), np.array(-0.5))).astype(int)
            truth = {c: float(y[area == c].mean()) for c in np.unique(area)}
            held = {k: {c: [] for c in truth} for k in lengths}
            for r in range(reps):
                s = CATSession(bank, stopping=MaxItems(max(lengths)), rng=[w, r])
                while not s.finished:
                    item = s.next_item()
                    s.record(item, int(y[bank.index_of(item)]))
                    if len(s.history) in held:
                        for c, e in s.predicted_score(by="area").by_category.items():
                            held[len(s.history)][c].append(e.low <= truth[c] <= e.high)
            for k in lengths:
                print(f"categories {kind:9s} {where:6s} {k:3d} items: coverage " + ", ".join(
                    f"{c} ({truth[c]:.2f}) {np.mean(v):.3f}" for c, v in sorted(held[k].items(), key=lambda x: int(x[0][1:]))),
                    flush=True)


_THRESHOLDS = (0.1, 0.3, 0.5)


def _beyond_edges(percentiles, edge):
    p = np.asarray(percentiles)
    return (p > 1.0 - edge) | (p < edge)


def _beyond_probabilities(probabilities, weights, answers, below, above):
    """Posterior probabilities (P(below), P(above)) of a grid of worlds: ``probabilities`` (nodes, k)
    each node's answer probabilities of the asked items, ``weights`` (nodes,) its prior, ``below`` /
    ``above`` (nodes,) bool, the nodes beyond the population's edges."""
    q = np.clip(probabilities, 1e-12, 1 - 1e-12)
    log_lik = np.where(answers[None, :] == 1, np.log(q), np.log1p(-q)).sum(axis=1)
    post = weights * np.exp(log_lik - log_lik.max())
    post /= post.sum()
    return float(post[below].sum()), float(post[above].sum())


def flag_runs(seeds, lengths, margins=(), alternatives=False):
    from catengine import CATSession
    from catengine.scoring.model_based import response
    from catengine.scoring.standing import EDGE, band_evidence, standing, trait_standing
    from catengine.session.fast_replay import CompiledReplay

    n, n_items = 400, 300
    for kind in ("guess", "twofactor"):
        out = {k: {f"{part}{rule}": [] for part in ("beyond", "middle") for rule in ("", "_trait", "_pct", "_z")}
               for k in lengths}
        for seed in seeds:
            rng = np.random.default_rng([seed, 0 if kind == "guess" else 1])
            p = truth_model(kind, rng, n_items)
            y = (rng.random((n, n_items)) < p(rng.normal(0.0, 1.0, n), rng.normal(0.0, 1.0, n))).astype(np.int8)
            accuracy = y.mean(axis=1)
            # the world's own posterior: nodes over (theta, eta), the true prior N(0, 1) x N(0, 1)
            t_nodes, e_nodes = np.meshgrid(np.linspace(-5, 7, 121), np.linspace(-4, 4, 1 if kind == "guess" else 17))
            t_nodes, e_nodes = t_nodes.ravel(), e_nodes.ravel()
            world_p = p(t_nodes, e_nodes) if kind != "guess" else p(t_nodes)
            world_w = np.exp(-0.5 * (t_nodes**2 + e_nodes**2))
            world_acc = world_p.mean(axis=1)
            ids = [f"q{j:03d}" for j in range(n_items)]
            lo60, hi85 = np.quantile(accuracy, [0.60, 0.85])
            perm = rng.permutation(n)
            for part, train, test in (("beyond", np.flatnonzero(accuracy < lo60), np.flatnonzero(accuracy > hi85)),
                                      ("middle", perm[:240], perm[240:])):
                bank = fitted_bank(y[train], ids)
                plan = CompiledReplay.for_session(CATSession(bank, rng=0))
                population = plan.session.items.population
                cal = accuracy[train]
                cal_edges = np.quantile(cal, [0.05, 0.95])
                bank_t = np.linspace(-8.0, 10.0, 361)
                bank_p = response(plan.session.params, bank_t)
                trait_edges = np.quantile(population.thetas, [0.05, 0.95])
                keep = accuracy[test] > cal.max() if part == "beyond" else \
                    (accuracy[test] >= np.quantile(cal, 0.1)) & (accuracy[test] <= np.quantile(cal, 0.9))
                for i in test[keep]:
                    run = plan.run(y[i].astype(float), None, max(lengths), np.random.default_rng([seed, int(i)]))
                    for k in lengths:
                        st = standing(population, run.estimates[0, k], run.items[:k], y[i][run.items[:k]])
                        out[k][part].append(bool(st.extrapolation))
                        out[k][part + "_pct"].append(st.percentile)
                        out[k][part + "_z"].append(band_evidence(population.band_rates, run.items[:k], y[i][run.items[:k]]))
                        out[k][part + "_trait"].append(bool(trait_standing(population, run.estimates[0, k]).extrapolation))
                        if alternatives:
                            asked, answers = run.items[:k], y[i][run.items[:k]]
                            out[k].setdefault(part + "_world", []).append(_beyond_probabilities(
                                world_p[:, asked], world_w, answers, world_acc < cal_edges[0], world_acc > cal_edges[1]))
                            out[k].setdefault(part + "_bank", []).append(_beyond_probabilities(
                                bank_p[:, asked], np.ones(bank_t.size), answers, bank_t < trait_edges[0],
                                bank_t > trait_edges[1]))
        for k in lengths:
            o = out[k]
            print(f"flag, {kind}, {k} items: fired for {np.mean(o['beyond']):.3f} of {len(o['beyond'])} LLMs beyond the "
                  f"calibration maximum and {np.mean(o['middle']):.3f} of {len(o['middle'])} inside its middle 80% "
                  f"(the trait among the calibration traits: {np.mean(o['beyond_trait']):.3f} and "
                  f"{np.mean(o['middle_trait']):.3f}; the answer percentile: "
                  f"{np.mean(_beyond_edges(o['beyond_pct'], EDGE)):.3f} and {np.mean(_beyond_edges(o['middle_pct'], EDGE)):.3f})")
            beyond, middle = np.array(o["beyond_z"]), np.array(o["middle_z"])
            for margin in margins:
                print(f"  margin {margin:.2f}: fired for {np.mean(beyond[:, 1] > margin):.3f} beyond and "
                      f"{np.mean((middle[:, 1] > margin) | (middle[:, 0] < -margin)):.3f} inside")
            for name, label in (("world", "the world's own posterior"), ("bank", "the bank's 2PL, flat prior")):
                if "beyond_" + name not in o:
                    continue
                beyond, middle = np.array(o["beyond_" + name]), np.array(o["middle_" + name])
                print(f"  {label}: " + "; ".join(
                    f"above {c}: {np.mean(beyond[:, 1] > c):.3f} beyond, {np.mean(middle.max(axis=1) > c):.3f} inside"
                    for c in _THRESHOLDS))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=2000)
    ap.add_argument("--lengths", default="10,25,50")
    ap.add_argument("--flag-seeds", default="0,1,2,3")
    ap.add_argument("--flag-margins", default="", help="other margins to read the flag's band evidence with, e.g. 0,0.25,1")
    ap.add_argument("--variance-rules", action="store_true",
                    help="also print the coverage of the same estimate with the draws' own variance alone, and of "
                         "an interval of the Monte-Carlo SD (an oracle no session has)")
    ap.add_argument("--categories", type=int, default=0,
                    help="also this many sessions per LLM scored by category (categories of 15 / 35 / 60 / 90 items)")
    ap.add_argument("--flag-alternatives", action="store_true",
                    help="also classify the same answers with the world's own posterior and with the bank's 2PL")
    args = ap.parse_args(argv)
    lengths = tuple(int(x) for x in args.lengths.split(","))
    t0 = time.perf_counter()
    if args.reps:  # --reps 0: the flag and category runs only
        score_runs(args.reps, lengths, args.variance_rules)
    if args.categories:
        category_runs(args.categories, lengths)
    seeds = [int(x) for x in args.flag_seeds.split(",") if x]
    if seeds:
        flag_runs(seeds, lengths, [float(x) for x in args.flag_margins.split(",") if x], args.flag_alternatives)
    print(f"({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
