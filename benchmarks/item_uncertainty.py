"""Do the item SEs a bank stores match the actual error of its item estimates? (issue 13, item 2)

    python benchmarks/item_uncertainty.py                   # N = 100 LLMs, J = 500 items, 20 replications
    python benchmarks/item_uncertainty.py --n 22 --j 2000 --reps 10 --boot 0

Simulated 2PL (a ~ U(0.5, 1), b ~ N(0, 0.5^2), theta ~ N(0, 1)); fixed items, new LLMs and answers
in every replication. Each cBMM fit (defaults: empirical-Bayes priors) is linked to the true
scale by Stocking-Lord on all items (the library's linking: bank scale = truth's), its SEs moved
with it, and the script prints, over items and replications,

* RMS z of (estimate - truth) / stored SD for a and b (1 = honest; > 1 too narrow),
* the ratio of the stored SD to the actual RMS error, and the coverage of +-1.96 SD intervals,

for the observed-information SDs the banks store and, on ``--boot-reps`` replications, for a
bootstrap over LLM rows (``--boot`` refits, each linked to the main fit by Stocking-Lord).
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np

from calibration.data import ResponseData
from calibration.linking import link
from calibration.methods.cbmm.calibrator import CBMMCalibrator
from calibration.simulate import draw_abilities, draw_item_params, simulate_responses
from catengine.models.params import ItemParams


def linked(fit, ref_params, a_sd=None, b_sd=None):
    """(a, b, a_sd, b_sd) of ``fit`` on the scale of ``ref_params`` (Stocking-Lord on all items)."""
    est = ItemParams("2pl", a=fit.a_, b=fit.b_)
    res = link(ref_params, est, method="stocking-lord")
    A, B = res.A, res.B
    a = fit.a_ / A
    b = fit.b_ - fit.a_ * B / A
    if a_sd is None:
        return a, b, None, None
    va, vb, c = a_sd**2, b_sd**2, fit.ab_cov_
    r = B / A
    return a, b, np.sqrt(va) / A, np.sqrt(np.maximum(vb - 2 * r * c + r * r * va, 0))


def summary(name, err_a, sd_a, err_b, sd_b):
    za, zb = err_a / sd_a, err_b / sd_b
    print(f"  {name:<34s} RMS z a {np.sqrt(np.mean(za**2)):.3f}  b {np.sqrt(np.mean(zb**2)):.3f} | "
          f"SD / RMS error a {np.sqrt(np.mean(sd_a**2)) / np.sqrt(np.mean(err_a**2)):.3f}  "
          f"b {np.sqrt(np.mean(sd_b**2)) / np.sqrt(np.mean(err_b**2)):.3f} | "
          f"95% coverage a {np.mean(np.abs(za) <= 1.96):.3f}  b {np.mean(np.abs(zb) <= 1.96):.3f}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=100)
    p.add_argument("--j", type=int, default=500)
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--boot", type=int, default=50, help="bootstrap refits per replication (0: skip)")
    p.add_argument("--boot-reps", type=int, default=5, help="replications that also get the bootstrap")
    p.add_argument("--prior", default="empirical-bayes")
    args = p.parse_args(argv)
    warnings.simplefilter("ignore")
    truth = draw_item_params("2pl", args.j, rng=7)
    rows = {"info": ([], [], [], []), "boot": ([], [], [], []), "info_on_boot_reps": ([], [], [], [])}
    t0 = time.time()
    for rep in range(args.reps):
        theta = draw_abilities(args.n, rng=1000 + rep)
        data = simulate_responses(truth, theta, rng=2000 + rep)
        fit = CBMMCalibrator(prior=args.prior, progress=False).fit(data)
        keep = ~fit.perfect_items_
        a, b, sa, sb = linked(fit, truth, fit.a_sd_, fit.b_sd_)
        for lst, v in zip(rows["info"], (a - truth.a, sa, b - truth.b, sb)):
            lst.append(v[keep])
        if args.boot and rep < args.boot_reps:
            main_params = ItemParams("2pl", a=a, b=b)
            rng = np.random.default_rng(rep)
            draws_a, draws_b = [], []
            for _ in range(args.boot):
                idx = rng.integers(0, args.n, args.n)
                boot = ResponseData.from_arrays(data.correct[idx])
                bf = CBMMCalibrator(prior=args.prior, progress=False).fit(boot)
                ba, bb, _, _ = linked(bf, main_params)
                draws_a.append(ba)
                draws_b.append(bb)
            bsa, bsb = np.std(draws_a, axis=0, ddof=1), np.std(draws_b, axis=0, ddof=1)
            ok = keep & (bsa > 0) & (bsb > 0)
            for lst, v in zip(rows["boot"], (a - truth.a, bsa, b - truth.b, bsb)):
                lst.append(v[ok])
            for lst, v in zip(rows["info_on_boot_reps"], (a - truth.a, sa, b - truth.b, sb)):
                lst.append(v[ok])
    print(f"simulated 2PL, N = {args.n} LLMs, J = {args.j} items, {args.reps} replications, cBMM prior={args.prior} "
          f"({time.time() - t0:.0f} s)")
    summary("observed information (stored)", *(np.concatenate(x) for x in rows["info"]))
    if rows["boot"][0]:
        summary(f"same, on the {args.boot_reps} bootstrap replications", *(np.concatenate(x) for x in rows["info_on_boot_reps"]))
        summary(f"bootstrap over LLMs (B = {args.boot})", *(np.concatenate(x) for x in rows["boot"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
