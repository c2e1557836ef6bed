"""Paired comparisons of two LLMs (``catengine.PairedSession``): error rates at the stop, on real
held-out LLMs and in simulation, and the items they need beside a fixed-length paired sample.

``python benchmarks/paired.py [math500-cbmm|math500-saem|amc23-saem|chembench|sim|rank|near-zero|caps|all]
[--pairs 40] [--reps 1] [--seed 0] [--folds 5] [--sim-pairs 200] [--session K=V,...] [--caps 100,300,500]``

* **Real data** (``math500-cbmm``: MATH500, 2PL by cBMM; ``math500-saem``: MATH500 with CoT
  lengths, LaRT by SAEM; ``amc23-saem``; ``chembench``: the realigned ChemBench matrix, 2PL): the
  LLMs are split into ``--folds`` folds (``llm_folds``: the runs of one LLM stay in one fold); for each fold a bank is calibrated on the others (``CBMMCalibrator`` /
  ``LaRTSAEMCalibrator`` with their defaults, without the cross-fitted interval check, which the
  paired design does not read) and up to ``--pairs`` random pairs of held-out runs of different
  LLMs are replayed through a default ``PairedSession`` (stop once decided or tied, else at its
  default cap, ``catengine.paired.DEFAULT_MAX_ITEMS``) over the items both answered. Printed: the share of pairs
  whose interval holds the true full-benchmark difference (the mean over all items of a's answers
  minus b's) at the stop, the decisions ("a"/"b" right, wrong direction, tie, undecided), items
  used, and beside them a fixed-length paired random sample of n items (uniform without
  replacement, the usual t interval with finite-population correction at 95%, decided when it
  excludes 0): its decision and wrong-direction rates at each n, and the n at which it decides
  as many pairs as the paired session (``items per decision`` = mean items / decision rate).
* **Simulation** (``sim``): 500 items whose answers follow a 3PL with guessing floors c ~ U(0.1,
  0.3), a bank fitted by cBMM (2PL, so its model is wrong) on 200 simulated calibration LLMs, and
  ``--sim-pairs`` new pairs for each gap of 0, 1, 3 and 10 points: a and b drawn from the 3PL,
  then b's answers flipped at random until the realised full-benchmark gap is exactly that many
  points. At 0 points every "a" or "b" is an error (the test's size).
* **Close pairs** (``near-zero``): every pair of held-out MATH500 runs of different LLMs within 2
  points of each other (LaRT banks by SAEM on the other folds), replayed ``--reps`` times (default
  10 here) with the interval checked after every answer: the share of paths on which it ever
  missed the true difference (the confidence sequence's time-uniform error).
* **Item caps** (``caps``): the real-data sets ``math500-saem``, ``math500-cbmm`` and ``chembench``
  replayed once per cap in ``--caps`` (0 = every item compared), then one table: per set and cap the
  share decided, wrong directions, mean items, items per decision, and the items per decision of
  the fixed-length sample deciding as many pairs at 95% and 99% (the measurement behind
  ``DEFAULT_MAX_ITEMS``, docs/comparisons.md).
* **Leaderboard** (``rank``): 12 calibration LLMs (one run each, different LLMs) of the shipped
  ``math500_2pl`` bank, each replayed from its stored answers by a default ``CATSession`` to its
  default stop, logged; ``catengine.paired.leaderboard`` ranks the logs (Bonferroni over the 66
  pairs) and every pair it separates is checked against the full data (the bank was fitted on
  these LLMs, so this checks the ranking's bookkeeping, not extrapolation). Repeated ``--reps``
  times with different draws of LLMs.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _paths import CHEMBENCH, lart_files  # noqa: E402

SETS = ("math500-cbmm", "math500-saem", "amc23-saem", "chembench", "sim", "rank", "near-zero", "caps")
#: the sets the ``caps`` measurement replays, and its default caps (0 = every item compared)
CAP_SETS = ("math500-saem", "math500-cbmm", "chembench")
CAPS = (100, 300, 500, 1000, 0)
FIXED_LENGTHS = (10, 25, 50, 100, 150, 200, 300, 400, 500, 700, 1000, 1500, 2000)
#: levels of the fixed-length t interval compared
LEVELS = (0.95, 0.99)


def load(benchmark):
    import calibration

    from calibration.heldout import with_llm_groups

    if benchmark in ("math500", "amc23"):
        acc, cot = lart_files(benchmark)
        return with_llm_groups(calibration.load_responses(acc, cot=cot))[0]
    return with_llm_groups(calibration.load_responses(CHEMBENCH / "responses_models_x_items.csv.gz", wide=True))[0]


def fit_bank(train, method, seed):
    from calibration import CBMMCalibrator, LaRTSAEMCalibrator

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if method == "saem":
            return LaRTSAEMCalibrator(rng=seed).fit(train).to_item_bank("paired_check", interval_check=False)
        return CBMMCalibrator(rng=seed, progress=False).fit(train).to_item_bank("paired_check", interval_check=False)


def answers(data):
    from catengine.responses.data import MISSING

    return np.where(data.correct == MISSING, np.nan, data.correct.astype(float))


def replay_pair(bank, ya, yb, cota, cotb, items, rng, **kwargs):
    """One PairedSession to its default stop on recorded answers (bank order); returns its Comparison."""
    from catengine import PairedSession

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # CoT lengths beyond the calibration's: expected on held-out LLMs
        s = PairedSession(bank, rng=rng, items=items, **kwargs)
        while not s.finished:
            item = s.next_item()
            j = bank.index_of(item)
            s.record(item, int(ya[j]), int(yb[j]), None if cota is None else float(cota[j]),
                     None if cotb is None else float(cotb[j]))
        return s.comparison(details=False)


def fixed_length(delta, lengths, rng, reps=200, levels=LEVELS):
    """Per level and length n: (decision rate, wrong-direction rate) of the fixed-length paired random
    sample of n items (t interval with finite-population correction) over ``reps`` draws."""
    from scipy.stats import t as student

    J = delta.size
    truth = delta.mean()
    out = {level: {} for level in levels}
    for n in lengths:
        if n >= J:
            for level in levels:
                out[level][n] = (float(truth != 0), 0.0)
            continue
        idx = np.argsort(rng.random((reps, J)), axis=1)[:, :n]
        d = delta[idx]
        mean = d.mean(1)
        se = d.std(1, ddof=1) / np.sqrt(n) * np.sqrt(1 - n / J)
        for level in levels:
            half = student.ppf(0.5 + level / 2, n - 1) * se
            dec_a, dec_b = mean - half > 0, mean + half < 0
            wrong = (dec_a & (truth <= 0)) | (dec_b & (truth >= 0))
            out[level][n] = (float(np.mean(dec_a | dec_b)), float(np.mean(wrong)))
    return out


def summarise(name, rows, fixed, J_mean):
    """Print the figures of a set of replays; returns the key ones (decided share, wrong-direction
    share, mean items, items per decision, and the fixed-length sample's items per decision at each
    level when it decides as many pairs, else None)."""
    n = len(rows)
    truth = np.array([r["truth"] for r in rows])
    cover = np.mean([r["low"] - 1e-12 <= r["truth"] <= r["high"] + 1e-12 for r in rows])
    dec = np.array([r["decision"] for r in rows])
    decided = np.isin(dec, ("a", "b"))
    wrong = ((dec == "a") & (truth <= 0)) | ((dec == "b") & (truth >= 0))
    tie_wrong = (dec == "tie") & (np.abs(truth) > np.array([r["margin"] for r in rows]) + 1e-12)
    used = np.array([r["n"] for r in rows])
    width = np.mean([r["high"] - r["low"] for r in rows])
    mc = np.sqrt(max(cover * (1 - cover), 1e-12) / n)
    print(f"\n== {name}: {n} paired replays (bank of ~{J_mean:.0f} items)")
    print(f"coverage of the true difference at the stop {cover:.3f} (MC SE {mc:.3f}); decided a/b {decided.mean():.3f} "
          f"(wrong direction {wrong.mean():.3f} of all pairs, {wrong.sum()} replays), tie {np.mean(dec == 'tie'):.3f} "
          f"(|truth| > margin: {tie_wrong.sum()}), undecided {np.mean(dec == 'undecided'):.3f}")
    print(f"items used: mean {used.mean():.1f}, median {np.median(used):.0f}; among decided pairs mean "
          f"{used[decided].mean() if decided.any() else float('nan'):.1f}; mean interval width at the stop {width:.3f}; "
          f"items per decision {used.mean() / max(decided.mean(), 1e-12):.1f}")
    gaps = np.abs(truth)
    for lo, hi in ((0, 0.02), (0.02, 0.05), (0.05, 0.1), (0.1, 1.01)):
        part = (gaps >= lo) & (gaps < hi)
        if part.any():
            print(f"  |truth| in [{lo:.2f}, {hi:.2f}): {part.sum():4d} pairs, decided {decided[part].mean():.2f}, "
                  f"wrong {wrong[part].mean():.3f}, mean items {used[part].mean():.1f}, coverage "
                  f"{np.mean([(r['low'] - 1e-12 <= r['truth'] <= r['high'] + 1e-12) for r, p in zip(rows, part) if p]):.3f}")
    figures = {"decided": float(decided.mean()), "wrong": float(wrong.mean()), "mean": float(used.mean()),
               "per_decision": float(used.mean() / max(decided.mean(), 1e-12)), "fixed": {}}
    if fixed:
        for level in LEVELS:
            lengths = sorted(fixed[0][level])
            rate = np.array([[f[level][k][0] for k in lengths] for f in fixed]).mean(0)
            werr = np.array([[f[level][k][1] for k in lengths] for f in fixed]).mean(0)
            print(f"fixed-length paired random sample ({100 * level:g}% t interval, fpc): " + "; ".join(
                f"n={k} decided {r:.3f} wrong {w:.3f}" for k, r, w in zip(lengths, rate, werr)))
            target = decided.mean()
            if rate[-1] >= target and target > 0:
                k = int(np.searchsorted(rate, target))
                if k == 0:
                    n_eq = lengths[0]
                else:
                    x0, x1, r0, r1 = lengths[k - 1], lengths[k], rate[k - 1], rate[k]
                    n_eq = x0 + (target - r0) / max(r1 - r0, 1e-12) * (x1 - x0)
                figures["fixed"][level] = n_eq / target
                print(f"  at {100 * level:g}% it decides as many pairs ({target:.3f}) at n = {n_eq:.0f} items for every "
                      f"pair (items per decision {n_eq / target:.1f}) against the paired session's mean {used.mean():.1f} "
                      f"(items per decision {used.mean() / target:.1f})")
            else:
                figures["fixed"][level] = None
                print(f"  at {100 * level:g}% it decides fewer pairs than the paired session ({target:.3f}) at every n")
    return figures


def run_real(name, n_pairs, reps, seed, folds, options=None):
    from calibration.heldout import llm_folds

    benchmark, _, method = name.partition("-")
    data = load(benchmark)
    Y = answers(data)
    cot = data.cot_length if method == "saem" else None
    groups = data.llm_groups
    rng = np.random.default_rng(seed)
    rows, fixed, sizes = [], [], []
    t0 = time.perf_counter()
    for k, test in enumerate(llm_folds(groups, folds, rng)):
        train = np.setdiff1d(np.arange(data.n_subjects), test)
        bank = fit_bank(data.subset(subjects=train), method, seed)
        candidates = [(i, m) for a_, i in enumerate(test) for m in test[a_ + 1:] if groups[i] != groups[m]]
        pick = rng.permutation(len(candidates))[:n_pairs]
        for c in pick:
            i, m = candidates[c]
            both = np.isfinite(Y[i]) & np.isfinite(Y[m])
            if both.sum() < 10:
                continue
            items = None if both.all() else [data.item_ids[j] for j in np.flatnonzero(both)]
            order = np.array([bank.index_of(data.item_ids[j]) for j in range(data.n_items)])
            ya, yb = np.full(bank.n_items, np.nan), np.full(bank.n_items, np.nan)
            ya[order], yb[order] = Y[i], Y[m]
            ca = cb = None
            if cot is not None:
                ca, cb = np.full(bank.n_items, np.nan), np.full(bank.n_items, np.nan)
                ca[order], cb[order] = cot[i], cot[m]
            delta = (Y[i] - Y[m])[both]
            truth = float(delta.mean())
            for r in range(reps):
                c_ = replay_pair(bank, ya, yb, ca, cb, items, np.random.default_rng([seed, int(i), int(m), r]),
                                 **(options or {}))
                rows.append({"truth": truth, "low": c_.low, "high": c_.high, "decision": c_.decision, "n": c_.n_items,
                             "margin": c_.margin})
            fixed.append(fixed_length(delta, [n for n in FIXED_LENGTHS if n < delta.size] + [delta.size],
                                      np.random.default_rng([seed, int(i), int(m), 99])))
            sizes.append(delta.size)
        print(f"  {name} fold {k}: bank from {train.size} runs, {len(rows)} replays so far, "
              f"{time.perf_counter() - t0:.0f} s", flush=True)
    # lengths beyond a pair's item count: decided as at its full count
    lengths = sorted({n for f in fixed for n in f[LEVELS[0]]})
    filled = []
    for f in fixed:
        top = max(f[LEVELS[0]])
        filled.append({level: {n: f[level][n] if n in f[level] else f[level][top] for n in lengths}
                       for level in LEVELS})
    return summarise(name, rows, filled, float(np.mean(sizes)))


def run_caps(caps, n_pairs, seed, folds):
    """Each real-data set of :data:`CAP_SETS` at each item cap (0: every item compared), then one table."""
    from catengine.paired import PairedStopping

    table = []
    for name in CAP_SETS:
        for cap in caps:
            print(f"\n-- {name}, cap {cap or 'none (every item compared)'}", flush=True)
            options = {"stopping": PairedStopping(max_items=cap or 10 ** 9)}
            table.append((name, cap, run_real(name, n_pairs, 1, seed, folds, options)))
    print("\n== items per decision by cap: the paired session beside the fixed-length sample deciding as many pairs")
    print(f"{'data':14s} {'cap':>5s} {'decided':>8s} {'wrong':>6s} {'mean items':>10s} {'per decision':>12s} "
          f"{'fixed 95%':>9s} {'fixed 99%':>9s}")
    for name, cap, f in table:
        fixed = [f["fixed"].get(level) for level in LEVELS]
        print(f"{name:14s} {cap or 'none':>5} {f['decided']:8.3f} {f['wrong']:6.3f} {f['mean']:10.1f} "
              f"{f['per_decision']:12.1f} " + " ".join(f"{'-' if x is None else f'{x:.1f}':>9s}" for x in fixed))


def run_near_zero(reps, seed, folds, options=None):
    from catengine import PairedSession

    from calibration.heldout import llm_folds

    data = load("math500")
    Y, cot, groups = answers(data), data.cot_length, data.llm_groups
    paths = missed = pairs = 0
    for test in llm_folds(groups, folds, np.random.default_rng(seed)):
        train = np.setdiff1d(np.arange(data.n_subjects), test)
        bank = fit_bank(data.subset(subjects=train), "saem", seed)
        order = np.array([bank.index_of(data.item_ids[j]) for j in range(data.n_items)])
        for a_, i in enumerate(test):
            for m in test[a_ + 1:]:
                truth = float(np.mean(Y[i] - Y[m]))
                if groups[i] == groups[m] or abs(truth) >= 0.02:
                    continue
                pairs += 1
                y, t = np.empty((2, bank.n_items)), np.empty((2, bank.n_items))
                y[:, order], t[:, order] = Y[[i, m]], cot[[i, m]]
                for r in range(reps):
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        s = PairedSession(bank, rng=np.random.default_rng([seed, int(i), int(m), r]),
                                          **(options or {}))
                        ever = False
                        while not s.finished:
                            item = s.next_item()
                            j = bank.index_of(item)
                            s.record(item, int(y[0, j]), int(y[1, j]), t[0, j], t[1, j])
                            low, high = s.interval()
                            ever |= not low - 1e-12 <= truth <= high + 1e-12
                    paths += 1
                    missed += ever
    print(f"\n== near-zero: {pairs} held-out MATH500 pairs within 2 points, {reps} replays each (LaRT banks): the "
          f"interval, checked after every answer, ever missed the true difference on {missed} of {paths} paths "
          f"({missed / max(paths, 1):.4f})")


def simulate_bank(rng, n_items=500, n_calib=200):
    from scipy.special import expit

    import calibration

    a = rng.uniform(0.6, 2.0, n_items)
    b = rng.normal(0.0, 1.3, n_items)
    c = rng.uniform(0.1, 0.3, n_items)
    theta = rng.normal(0.0, 1.0, n_calib)
    p = c + (1 - c) * expit(np.outer(theta, a) + b)
    y = (rng.random(p.shape) < p).astype(np.int8)
    data = calibration.ResponseData.from_arrays(y, subject_ids=[f"llm{i:03d}" for i in range(n_calib)],
                                                item_ids=[f"q{j:03d}" for j in range(n_items)])
    return fit_bank(data, "cbmm", 0), (a, b, c)


def exact_gap_pair(rng, truth, gap_items):
    """Answers of a and b from the true 3PL, b's flipped at random until sum(a) - sum(b) = gap_items."""
    from scipy.special import expit

    a, b, c = truth
    theta = rng.normal(0.0, 1.0)
    p = c + (1 - c) * expit(a * theta + b)
    ya = (rng.random(p.size) < p).astype(int)
    yb = (rng.random(p.size) < p).astype(int)
    while ya.sum() - yb.sum() != gap_items:
        if ya.sum() - yb.sum() > gap_items:
            pool = np.flatnonzero(yb == 0)
            yb[rng.choice(pool, p=p[pool] / p[pool].sum())] = 1
        else:
            pool = np.flatnonzero(yb == 1)
            yb[rng.choice(pool, p=(1 - p[pool]) / (1 - p[pool]).sum())] = 0
    return ya, yb


def run_sim(n_pairs, seed, options=None):
    rng = np.random.default_rng([seed, 48])
    bank, truth = simulate_bank(rng)
    J = bank.n_items
    order = np.array([bank.index_of(f"q{j:03d}") for j in range(J)])
    for gap in (0, 1, 3, 10):
        rows, fixed = [], []
        t0 = time.perf_counter()
        for r in range(n_pairs):
            ya, yb = exact_gap_pair(rng, truth, int(round(gap * J / 100)))
            a_, b_ = np.empty(J), np.empty(J)
            a_[order], b_[order] = ya, yb
            c = replay_pair(bank, a_, b_, None, None, None, np.random.default_rng([seed, gap, r]), **(options or {}))
            rows.append({"truth": (ya - yb).mean(), "low": c.low, "high": c.high, "decision": c.decision, "n": c.n_items,
                         "margin": c.margin})
            fixed.append(fixed_length((ya - yb).astype(float), [n for n in FIXED_LENGTHS if n < J] + [J],
                                      np.random.default_rng([seed, gap, r, 99])))
        summarise(f"simulation, pairs {gap} points apart ({time.perf_counter() - t0:.0f} s)", rows, fixed, J)


def run_rank(reps, seed):
    from catengine import CATSession, open_item_bank
    from catengine.paired.leaderboard import leaderboard_from_logs

    bank = open_item_bank("math500_2pl")
    resp = bank.responses
    Y = resp["correct"].values.astype(float)
    groups = [str(g) for g in resp["subject_group"].values]
    subjects = [str(s) for s in resp["subject"].values]
    order = np.array([bank.index_of(str(i)) for i in resp["item"].values])
    rng = np.random.default_rng([seed, 4848])
    separated = wrong = pairs = ties = 0
    used = []
    for r in range(reps):
        names = sorted(set(groups))
        chosen_groups = rng.choice(len(names), 12, replace=False)
        rows = [groups.index(names[g]) if rng.random() < 0.5 else len(groups) - 1 - groups[::-1].index(names[g])
                for g in chosen_groups]
        with tempfile.TemporaryDirectory() as tmp:
            logs = []
            for i in rows:
                y = np.empty(bank.n_items)
                y[order] = Y[i]
                path = Path(tmp) / f"{i}.jsonl"
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    with CATSession(bank, rng=np.random.default_rng([seed, r, i]), subject=subjects[i], log=path) as s:
                        while not s.finished:
                            item = s.next_item()
                            s.record(item, int(y[bank.index_of(item)]))
                        used.append(s.n_items)
                logs.append(path)
            board = leaderboard_from_logs(logs, bank)
        acc = {subjects[i]: Y[i].mean() for i in rows}
        for p in board.pairs:
            pairs += 1
            if p.separated:
                separated += 1
                better = p.a if p.difference > 0 else p.b
                other = p.b if better == p.a else p.a
                wrong += not acc[better] > acc[other]
            else:
                ties += 1
    print(f"\n== rank: {reps} leaderboards of 12 calibration LLMs of math500_2pl, each replayed by a default CATSession "
          f"(mean {np.mean(used):.1f} items): {separated} of {pairs} pairs separated, {wrong} of them in the wrong "
          f"order by the full data; {ties} reported as ties")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sets", nargs="?", default="all", choices=SETS + ("all",))
    ap.add_argument("--pairs", type=int, default=40, help="pairs of held-out LLMs per fold (default 40)")
    ap.add_argument("--reps", type=int, default=1, help="replays per pair (real data) or leaderboards (rank)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--sim-pairs", type=int, default=200, help="simulated pairs per gap (default 200)")
    ap.add_argument("--caps", default=",".join(map(str, CAPS)), metavar="N,...",
                    help=f"item caps of the caps measurement (default {','.join(map(str, CAPS))}; 0 = every item)")
    ap.add_argument("--session", default=None, metavar="K=V,...",
                    help="PairedSession settings other than the defaults, e.g. uniform_share=1,max_items=200")
    args = ap.parse_args(argv)
    options = {}
    for pair in (args.session.split(",") if args.session else []):
        key, _, value = pair.partition("=")
        key = key.strip()
        if key == "max_items":
            from catengine.paired import PairedStopping

            options["stopping"] = PairedStopping(max_items=int(value))
        elif key in ("confidence",):
            options[key] = value
        elif key == "power_tuning":
            options[key] = value.strip().lower() in ("1", "true", "yes")
        else:
            options[key] = float(value)
    # near-zero and caps: alone
    chosen = tuple(s for s in SETS if s not in ("near-zero", "caps")) if args.sets == "all" else (args.sets,)
    for name in chosen:
        t0 = time.perf_counter()
        if name == "sim":
            run_sim(args.sim_pairs, args.seed, options)
        elif name == "rank":
            run_rank(max(args.reps, 1), args.seed)
        elif name == "caps":
            run_caps([int(c) for c in args.caps.split(",")], args.pairs, args.seed, args.folds)
        elif name == "near-zero":
            run_near_zero(args.reps if args.reps > 1 else 10, args.seed, args.folds, options)
        else:
            run_real(name, args.pairs, args.reps, args.seed, args.folds, options)
        print(f"({name}: {time.perf_counter() - t0:.0f} s)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
