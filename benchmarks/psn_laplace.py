"""Seed 002 on its own data: PSN-IRT + last-layer Laplace on percent_0.7 (12 LLMs x 29,309 items).

Prints, side by side with the paper / the reference PyTorch run:

1. training time per epoch with the default settings (target <= 3 s; the reference PyTorch code
   took ~109-130 s per epoch on CPU), final training loss and the learned abilities;
2. the abilities' posterior (95% intervals, confidently separated pairs; paper: 2 of 66);
3. the saturation table: share of items with point 4PL information < 1e-4 at the 0/25/50/75/100th
   percentile abilities vs posterior-expected information;
4. the calibration table (ECE with 10 bins, NLL) for MAP, ability branch, b only, a and b jointly,
   both branches -- on truly held-out cells (removed before training) and with the paper's
   apparent protocol (cells of test.csv, whose responses are also in the training matrix), plus a
   sensitivity sweep that widens the posterior (likelihood temperature T);
5. the top-n subset experiment (n = 50 ... 1000): Kendall tau between the subset ranking and the
   full-item ranking for point vs posterior-expected information selection vs random;
6. which Laplace scaling the paper used: the table again with the posterior fitted on 10% of the
   cells (the paper: "unaffected by a 10x increase in fitting data" -- true of the Laplace of the
   mean loss, temperature="mean-loss", not of the plain summed one), and the separated-pair count
   with and without the posterior covariance;
7. how wide the ability posterior should be: abilities refitted with another training seed and on
   two disjoint halves of the items, their differences in units of the posterior SD (z; an honest
   posterior gives RMS z ~ 1) for the plain posterior and for temperature="mean-loss";
8. the same questions against the truth, on simulated 4PL data (N = 30, J = 1000, three seeds):
   the share of confidently ordered pairs (P > 0.95 or < 0.05) in the wrong order at T = 1, and
   RMS z of the abilities against the true ones with temperature="split-half".

Usage: python benchmarks/psn_laplace.py [--epochs 30] [--seed 3407] [--quick]
The numbers depend on the machine's load (timings) and on the seed (everything else).
"""

from __future__ import annotations

import argparse
import gzip
import sys
import time
from pathlib import Path

import numpy as np
from scipy import optimize, stats

from calibration.data import ResponseData
from calibration.methods.psn import PSNCalibrator, calibration_report, fit_item_posterior, p_ahead
from calibration.methods.psn.laplace import laplace_from_network, n_separated_pairs
from calibration.methods.psn.network import A, BETA
from calibration.methods.psn.replication import compare_ability_fits, split_half_check
from catengine.models import logistic
from catengine.models.expected_information import expected_information
from catengine.models.params import ItemParams

from _paths import PSN_IRT, psn_missing

DATA = PSN_IRT  # not shipped (no license stated): read from beside the repository
REF_THETA = np.array([2.431, 5.913, 3.664, 6.863, -7.312, 3.315, -3.164, 2.051, 1.131, -1.069, -4.578, 0.992])
REF_LOSS = 0.3294
PAPER_SATURATION = {"point": [70.2, 20.9, 44.4, 63.4, 88.0], "posterior": [9.3, 0.0, 0.0, 0.01, 6.5]}
REF_SATURATION_POINT = [67.1, 22.3, 47.7, 64.8, 89.6]
PAPER_CALIBRATION = {"map": (0.033, 0.285), "ability": (0.047, 0.258), "b": (0.081, 0.293), "ab": (0.182, 0.383), "ability+b": (0.189, 0.390)}
PAPER_SUBSET = {  # n: (point acc, point refit, posterior acc, posterior refit, random acc, random refit)
    50: (0.780, 0.846, 0.717, 0.737, 0.788, 0.871),
    100: (0.681, 0.561, 0.813, 0.800, 0.792, 0.891),
    200: (0.532, 0.636, 0.772, 0.870, 0.883, 0.959),
    400: (0.554, 0.626, 0.862, 0.870, 0.869, 0.971),
    1000: (0.687, 0.657, 0.870, 0.909, 0.886, 0.997),
}
CONFIGS = ("map", "ability", "b", "ab", "ability+b")


def load():
    Y = np.loadtxt(DATA / "percent_0.7.csv.gz", delimiter=",").astype(np.int8)
    with gzip.open(DATA / "test.csv.gz", "rt") as fh:
        T = np.genfromtxt(fh, delimiter=",")
    sel = np.loadtxt(DATA / "selected_item_indices_0.7.csv", skiprows=1, dtype=np.int64)
    return Y, T[:, sel]


def native_params(cal):
    """Native-scale 4PL with ordered asymptotes: ItemParams (slope-intercept), beta SD as b SD."""
    p = cal.item_params(standardize=False)
    return p, p.a.__abs__() * cal.item_posterior_.marginal_sd()


def saturation(cal, n_nodes=41):
    """41 Gauss-Hermite nodes: accurate to ~1% up to b SD ~ 4 (9 nodes suffice below SD ~ 1)."""
    p, b_sd = native_params(cal)
    q = np.percentile(cal.theta_, [0, 25, 50, 75, 100])
    point = logistic.item_information(p, q)
    post = expected_information(q, p.a, p.b, p.c, p.d, b_sd, n_nodes=n_nodes)
    return q, 100 * (point < 1e-4).mean(axis=1), 100 * (post < 1e-4).mean(axis=1)


def refit_theta(p: ItemParams, Y, items):
    """ML theta of every subject on ``items`` with item parameters fixed (grid + bounded refinement)."""
    sub = p.subset(items)
    grid = np.linspace(-25, 25, 201)
    out = np.empty(Y.shape[0])
    for i in range(Y.shape[0]):
        y = Y[i, items]
        ll = logistic.log_likelihood(sub, grid, y)
        k = int(np.argmax(ll))
        lo, hi = grid[max(k - 1, 0)], grid[min(k + 1, grid.size - 1)]
        res = optimize.minimize_scalar(lambda t: -float(logistic.log_likelihood(sub, t, y)), bounds=(lo, hi), method="bounded")
        out[i] = res.x
    return out


def subset_experiment(cal, Y, rng, sizes=(50, 100, 200, 400, 1000), n_random=20):
    p, b_sd = native_params(cal)
    th = cal.theta_
    point = logistic.item_information(p, th).sum(axis=0)  # information summed over the 12 LLMs
    post = expected_information(th, p.a, p.b, p.c, p.d, b_sd).sum(axis=0)
    oracle = th
    rows = {}
    for n in sizes:
        res = []
        for crit in (point, post):
            items = np.argsort(-crit, kind="stable")[:n]
            acc = (Y[:, items] == 1).mean(axis=1)
            res += [stats.kendalltau(acc, oracle).statistic, stats.kendalltau(refit_theta(p, Y, items), oracle).statistic]
        r_acc, r_fit = [], []
        for _ in range(n_random):
            items = rng.choice(Y.shape[1], n, replace=False)
            r_acc.append(stats.kendalltau((Y[:, items] == 1).mean(axis=1), oracle).statistic)
            r_fit.append(stats.kendalltau(refit_theta(p, Y, items), oracle).statistic)
        res += [float(np.nanmean(r_acc)), float(np.nanmean(r_fit))]
        overlap = len(set(np.argsort(-point)[:n]) & set(np.argsort(-post)[:n])) / n
        rows[n] = (res, overlap)
    return rows


def calib_table(cal, cells, title, rng_seed=1):
    rep = calibration_report(cal, cells, configurations=CONFIGS, n_draws=200, rng=rng_seed)
    print(f"\n{title}")
    print(f"{'configuration':<12} {'ECE':>7} {'NLL':>7}   paper ECE / NLL")
    for r in rep.rows:
        pe, pn = PAPER_CALIBRATION[r["configuration"]]
        print(f"{r['configuration']:<12} {r['ece']:>7.3f} {r['nll']:>7.3f}   {pe:.3f} / {pn:.3f}")
    return rep


def n_separated(mean, cov, *, use_covariance=True):
    if not use_covariance:
        cov = np.diag(np.diag(cov))
    return n_separated_pairs(p_ahead(mean, cov))


def refit_posteriors(cal, cells, temperature):
    """(ability, b-only, joint a-and-b) Laplace posteriors of the trained network on ``cells``."""
    net = cal.network_
    ability, item = laplace_from_network(net, cells, temperature=temperature)
    joint = fit_item_posterior(net.item_embeddings(), net.item_readout(BETA), cal.theta_, (cal.beta_, cal.a_, cal.c_, cal.d_),
                               cells, a_readout=net.item_readout(A), temperature=temperature)
    return ability, item, joint


def fitting_data_check(cal, paper_cells, rng):
    """Section 6: the calibration table with the Laplace fitted on 10% vs all of the cells."""
    subj, item, y = cal.cells_
    keep = np.sort(rng.choice(subj.size, subj.size // 10, replace=False))
    tenth = (subj[keep], item[keep], y[keep])
    saved = cal.ability_posterior_, cal.item_posterior_, cal._joint_ab
    print("\n6. Which Laplace scaling did the paper use? (paper: the a-and-b miscalibration was 'unaffected by a 10x increase")
    print("   in fitting data'.) ECE of 'ab' / 'ability' / 'b' with the Laplace fitted on 10% and on 100% of the cells:")
    print(f"   {'scaling':<40} {'10% of cells':>22} {'100% of cells':>22}")
    for label, mean_loss in (("plain (T = 1, summed loss)", False), ("temperature='mean-loss' (T = n cells)", True)):
        out = []
        for cells in (tenth, cal.cells_):
            T = float(cells[0].size) if mean_loss else 1.0
            cal.ability_posterior_, cal.item_posterior_, cal._joint_ab = refit_posteriors(cal, cells, T)
            rep = calibration_report(cal, paper_cells, configurations=CONFIGS, n_draws=200, rng=1)  # draws as in section 4
            ece = {r["configuration"]: r["ece"] for r in rep.rows}
            out.append(" / ".join(f"{ece[k]:.3f}" for k in ("ab", "ability", "b")))
        print(f"   {label:<40} {out[0]:>22} {out[1]:>22}")
    cal.ability_posterior_, cal.item_posterior_, cal._joint_ab = saved
    th1 = cal.theta_posterior(standardize=False)
    cal.ability_posterior_ = saved[0].with_temperature(float(saved[0].n_cells))
    thn = cal.theta_posterior(standardize=False)
    cal.ability_posterior_ = saved[0]
    print("   confidently separated pairs of 66 (paper: 2), with the posterior covariance / marginals only:")
    for label, th in (("plain (T = 1)", th1), ("mean-loss", thn)):
        print(f"   {label:<40} {n_separated(th['mean'], th['cov']):>3} / {n_separated(th['mean'], th['cov'], use_covariance=False):>3}")


def replication_check(cal, Y, settings, paper_cells, seed):
    """Section 7: refits (another training seed; two disjoint item halves) against the posterior SD."""
    data = ResponseData.from_arrays(Y)
    reseeded = PSNCalibrator(**{**settings, "rng": settings["rng"] + 1}).fit(data)
    halves = split_half_check(PSNCalibrator(**settings), data, rng=seed)
    half_cells = [int((Y[:, h] >= 0).sum()) for h in halves.item_halves]
    print("\n7. How wide should the ability posterior be? Abilities refitted, standardised over the 12 LLMs in each fit;")
    print("   z_i = (theta_i - theta'_i) / sqrt(sd_i^2 + sd'_i^2); an honest posterior gives RMS z ~ 1 (pairs: share of the 66")
    print("   orders that agree between the two fits, and the share the two posteriors expect to agree)")
    print(f"   {'refit':<28} {'posterior':<10} {'RMS z':>9} {'max |z|':>9} {'order agrees':>13} {'expected':>9}")
    rows = [("another training seed", "T = 1", compare_ability_fits(cal, reseeded)),
            ("another training seed", "mean-loss", compare_ability_fits(cal, reseeded, temperatures=(cal.ability_posterior_.n_cells,) * 2)),
            ("two halves of the items", "T = 1", halves)]
    rows.append(("two halves of the items", "mean-loss", compare_ability_fits(*halves.fits, temperatures=half_cells)))
    for label, post_label, out in rows:
        print(f"   {label:<28} {post_label:<10} {out.rms_z:9.2f} {out.max_abs_z:9.2f} {out.order_agreement:13.3f} "
              f"{out.expected_order_agreement:9.3f}")
    print("   implied temperature (mean z^2 at T = 1; SDs grow like sqrt(T)): "
          f"{rows[0][2].implied_temperature:.0f} (training seed), {halves.implied_temperature:.0f} (item halves)")
    T = max(1.0, halves.implied_temperature)  # what PSNCalibrator(temperature="split-half") would use with this split
    saved = cal.ability_posterior_, cal.item_posterior_, cal._joint_ab
    cal.ability_posterior_, cal.item_posterior_, cal._joint_ab = (x.with_temperature(T) for x in (saved[0], saved[1], cal.joint_item_posterior()))
    th = cal.theta_posterior(standardize=False)
    calib_table(cal, paper_cells, f"   with T = {T:.0f} (split-half): theta SD median {np.median(th['sd']):.3f}, b SD median "
                f"{np.median(cal.item_posterior_.marginal_sd()):.3f}, separated pairs {n_separated(th['mean'], th['cov'])} "
                f"(marginals only: {n_separated(th['mean'], th['cov'], use_covariance=False)})")
    cal.ability_posterior_, cal.item_posterior_, cal._joint_ab = saved


def simulated_truth_check(seeds=(1, 2, 3)):
    """Section 8: p_ahead and split-half SDs against the true abilities of simulated 4PL data."""
    from calibration.simulate import simulate_responses

    print("\n8. Against the truth: simulated 4PL, N = 30 LLMs x J = 1000 items (theta ~ N(0, 1), beta ~ N(0, 1),")
    print("   a ~ U(0.8, 2), c ~ U(0, 0.2), d ~ U(0.85, 1)); abilities compared on the standardised scale")
    print(f"   {'seed':>4} | {'T = 1: pairs called':>19} {'wrong order':>11} | {'split-half T':>12} {'RMS z vs truth':>14} {'at T = 1':>9}")
    for seed in seeds:
        g = np.random.default_rng(seed)
        N, J = 30, 1000
        theta = g.normal(0, 1, N)
        beta, a, c, d = g.normal(0, 1, J), g.uniform(0.8, 2, J), g.uniform(0, 0.2, J), g.uniform(0.85, 1, J)
        data = simulate_responses(ItemParams("4pl", a=a, b=-a * beta, c=c, d=d), theta, rng=g)
        cal = PSNCalibrator(rng=seed, temperature="split-half").fit(data)
        truth = (theta - theta.mean()) / theta.std()
        tempered = cal.theta_posterior()
        cal.ability_posterior_ = cal.ability_posterior_.with_temperature(1.0)
        plain = cal.theta_posterior()
        iu = np.triu_indices(N, 1)
        pa = p_ahead(plain["mean"], plain["cov"])[iu]
        called = (pa > 0.95) | (pa < 0.05)
        wrong = called & ((pa > 0.5) != (theta[:, None] > theta[None, :])[iu])
        rms = [float(np.sqrt(np.mean(((t["mean"] - truth) / t["sd"]) ** 2))) for t in (tempered, plain)]
        print(f"   {seed:>4} | {int(called.sum()):>9} of {iu[0].size:<7} {int(wrong.sum()):>11} | {cal.temperature_:>12.1f} "
              f"{rms[0]:>14.2f} {rms[1]:>9.2f}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--seed", type=int, default=3407)
    ap.add_argument("--quick", action="store_true", help="3 epochs, no held-out retraining, small subset experiment")
    ap.add_argument("--float64", action="store_true", help="train in float64 (default float32, as torch)")
    args = ap.parse_args(argv)
    if psn_missing(DATA / "percent_0.7.csv.gz") is not None:
        print(f"skipping: {psn_missing(DATA / 'percent_0.7.csv.gz')}")
        return 0
    epochs = 3 if args.quick else args.epochs
    dtype = "float64" if args.float64 else "float32"
    Y, Tsel = load()
    N, J = Y.shape
    print(f"percent_0.7: {N} LLMs x {J} items = {N * J} cells; epochs {epochs}, dtype {dtype}, seed {args.seed}")

    # ---------------------------------------------------------------- 1. training
    t0 = time.perf_counter()
    cal = PSNCalibrator(max_epochs=epochs, rng=args.seed, dtype=dtype, ordered_asymptotes=False).fit(ResponseData.from_arrays(Y))
    total = time.perf_counter() - t0
    ep = cal.epoch_seconds_
    cpu = np.asarray(cal.history_.epoch_cpu_seconds)
    print("\n1. Training (numpy/numba; the reference PyTorch run: median 109 s per epoch, 1 CPU thread)")
    print(f"   per epoch, wall: median {np.median(ep):.2f} s, min {ep.min():.2f} s, max {ep.max():.2f} s "
          f"(first epoch {ep[0]:.2f} s incl. any JIT compile); fit incl. Laplace {total:.1f} s")
    print(f"   per epoch, CPU time of this process (robust to a shared machine): median {np.median(cpu):.2f} s, "
          f"min {cpu.min():.2f} s; target <= 3 s; median wall speed-up vs 109 s: {109 / np.median(ep):.0f}x")
    print(f"   final training loss {cal.loss_trace_[-1]:.4f} (reference {REF_LOSS:.4f})")
    print(f"   abilities (native scale): {np.array2string(cal.theta_, precision=3)}")
    print(f"   reference retraining     : {np.array2string(REF_THETA, precision=3)}")
    print(f"   Kendall tau vs reference {stats.kendalltau(cal.theta_, REF_THETA).statistic:.3f}, "
          f"Pearson r {stats.pearsonr(cal.theta_, REF_THETA).statistic:.3f}; items flipped to c < d: "
          f"{int(np.sum(cal.c_ > cal.d_))}; orientation {cal.orientation_:+d}; a < 0 after ordering: "
          f"{int(np.sum(cal.item_params().a < 0))} (reference: 60)")

    # ---------------------------------------------------------------- 2. abilities
    th = cal.theta_posterior(standardize=False)
    pa = p_ahead(th["mean"], th["cov"])
    sep = n_separated_pairs(pa)
    order = np.argsort(-th["mean"])
    print("\n2. Ability posterior (ability branch, delta = 1, Fisher GGN over all cells)")
    for i in order:
        print(f"   LLM {i:>2}: theta {th['mean'][i]:7.3f}  95% [{th['mean'][i] - 1.96 * th['sd'][i]:7.3f}, {th['mean'][i] + 1.96 * th['sd'][i]:7.3f}]  sd {th['sd'][i]:.4f}")
    print(f"   confidently separated pairs: {sep} of {N * (N - 1) // 2} (paper: 2 of 66)")
    bsd = cal.item_posterior_.marginal_sd()
    print(f"   difficulty posterior SD: median {np.median(bsd):.4f}, 99th pct {np.quantile(bsd, 0.99):.4f}, max {bsd.max():.4f}")
    from calibration.methods.psn.laplace import tune_prior_precision

    ta = tune_prior_precision(cal.ability_posterior_)
    tb = tune_prior_precision(cal.item_posterior_)
    print(f"   evidence-tuned delta: ability {ta.prior_precision:.3g}, b {tb.prior_precision:.3g} "
          f"(theta SD median {np.median(ta.marginal_sd()):.4f}, b SD median {np.median(tb.marginal_sd()):.4f})")

    # ---------------------------------------------------------------- 3. saturation
    q, sp, spost = saturation(cal)
    print("\n3. Share of items with information < 1e-4 (%), at percentiles 0/25/50/75/100 of the abilities")
    print(f"   reference abilities here: {np.array2string(q, precision=2)} (paper: -7.43 -1.64 1.55 3.47 6.78)")
    print("   " + " | ".join(f"{h:>6}" for h in ("pct", "0", "25", "50", "75", "100")))
    print("   " + " | ".join([f"{'point':>6}"] + [f"{x:6.1f}" for x in sp]))
    print("   " + " | ".join([f"{'ref pt':>6}"] + [f"{x:6.1f}" for x in REF_SATURATION_POINT]) + "   (reference retraining, point)")
    print("   " + " | ".join([f"{'paper':>6}"] + [f"{x:6.1f}" for x in PAPER_SATURATION["point"]]) + "   (paper Table 1, point)")
    print("   " + " | ".join([f"{'post':>6}"] + [f"{x:6.1f}" for x in spost]) + "   (posterior-expected, Gauss-Hermite 41)")
    print("   " + " | ".join([f"{'paper':>6}"] + [f"{x:6.2f}" for x in PAPER_SATURATION["posterior"]]) + "   (paper Table 1, posterior)")
    p, b_sd = native_params(cal)
    expected_information(0.5, p.a, p.b, p.c, p.d, b_sd)  # compile / load the kernel first
    t1 = time.perf_counter()
    for _ in range(20):
        expected_information(0.5, p.a, p.b, p.c, p.d, b_sd)
    print(f"   posterior-expected information, {J} items x 9 nodes: {1e3 * (time.perf_counter() - t1) / 20:.1f} ms per call")

    # ---------------------------------------------------------------- 4. calibration
    rng = np.random.default_rng(0)
    s_t, i_t = np.nonzero(~np.isnan(Tsel))
    k = rng.choice(s_t.size, 5000, replace=False)
    paper_cells = (s_t[k], i_t[k], Tsel[s_t[k], i_t[k]])
    print("\n4. Calibration (5,000 cells, 200 posterior draws, ECE with 10 equal-width bins)")
    calib_table(cal, paper_cells, "   (b) paper protocol: test.csv cells of the selected items (their responses are also in the training matrix)")
    a0, i0, j0 = cal.ability_posterior_, cal.item_posterior_, cal.joint_item_posterior()
    n_cells = a0.n_cells
    for temp in (1e3, 1e4, 1e5, float(n_cells)):
        cal.ability_posterior_, cal.item_posterior_, cal._joint_ab = (x.with_temperature(temp) for x in (a0, i0, j0))
        thf = cal.theta_posterior(standardize=False)
        paf = p_ahead(thf["mean"], thf["cov"])
        label = "T = n cells (Laplace of the mean loss)" if temp == n_cells else f"T = {temp:g}"
        calib_table(cal, paper_cells, f"   (b') tempered, {label}: theta SD median {np.median(thf['sd']):.3f}, b SD median "
                    f"{np.median(cal.item_posterior_.marginal_sd()):.3f}, separated pairs {n_separated_pairs(paf)}")
        if temp == n_cells:
            q, sp_t, spost_t = saturation(cal)
            print("   saturation with this posterior (%, posterior-expected): " + " ".join(f"{x:.1f}" for x in spost_t))
    cal.ability_posterior_, cal.item_posterior_, cal._joint_ab = a0, i0, j0
    if not args.quick:
        s_all, i_all = np.nonzero(Y >= 0)
        ho = rng.choice(s_all.size, 5000, replace=False)
        Ytr = Y.copy()
        Ytr[s_all[ho], i_all[ho]] = -1
        held = (s_all[ho], i_all[ho], Y[s_all[ho], i_all[ho]].astype(float))
        cal_ho = PSNCalibrator(max_epochs=epochs, rng=args.seed, dtype=dtype, ordered_asymptotes=False).fit(ResponseData.from_arrays(Ytr))
        calib_table(cal_ho, held, "   (a) truly held-out: 5,000 cells removed before training")

    # ---------------------------------------------------------------- 5. subsets
    sizes = (50, 100) if args.quick else (50, 100, 200, 400, 1000)
    print("\n5. Top-n subsets: Kendall tau vs the full-item ability ranking (selection by information summed over the 12 LLMs;")
    print("   accuracy = mean correct on the subset, refit = ML theta on the subset with items fixed; random = mean of 20 draws)")
    for label, temp in (("default posterior (T = 1)", 1.0), ("tempered posterior (T = n cells)", float(i0.n_cells))):
        cal.item_posterior_ = i0.with_temperature(temp)
        rows = subset_experiment(cal, Y, np.random.default_rng(1), sizes=sizes, n_random=5 if args.quick else 20)
        print(f"   {label}")
        print(f"   {'n':>5} | {'point acc':>9} {'refit':>6} | {'post acc':>8} {'refit':>6} | {'rand acc':>8} {'refit':>6} | overlap | paper (pt acc/refit, post acc/refit)")
        for n, (r, overlap) in rows.items():
            pp = PAPER_SUBSET[n]
            print(f"   {n:>5} | {r[0]:9.3f} {r[1]:6.3f} | {r[2]:8.3f} {r[3]:6.3f} | {r[4]:8.3f} {r[5]:6.3f} | {overlap:7.2f} | "
                  f"{pp[0]:.3f}/{pp[1]:.3f}, {pp[2]:.3f}/{pp[3]:.3f}")
    cal.item_posterior_ = i0

    # ---------------------------------------------------------------- 6-7. which posterior width
    fitting_data_check(cal, paper_cells, np.random.default_rng(2))
    if not args.quick:
        settings = dict(max_epochs=epochs, rng=args.seed, dtype=dtype, ordered_asymptotes=False)
        replication_check(cal, Y, settings, paper_cells, seed=3)
        simulated_truth_check()
    return 0


if __name__ == "__main__":
    sys.exit(main())
