"""Full-benchmark score prediction on real LLMs, cross-fitted over LLM folds (issue 14).

``python benchmarks/score_prediction.py [math500|chembench|psn|all] [--folds 5] [--reps R] [--sd-scale s] [--seeds 14,15,16]``

For each fold of LLMs a bank is calibrated on the other folds with the library's calibrators
(MATH500: ``LaRTSAEMCalibrator`` with CoT lengths; ChemBench and the PSN-IRT matrix:
``CBMMCalibrator``, 2PL). MATH500's folds hold both runs of an LLM (its zero-shot and one-shot
prompts) out together; ``--ungrouped`` splits runs instead, which lets a held-out run's sibling
calibrate its bank and flatters every MATH500 figure. Each held-out LLM's recorded answers are then replayed, and after
k = 10 / 25 / 50 / 100 items its full-benchmark accuracy (the mean of all its answers) is
estimated by

* ``random-mean``  the plain mean of k random items (Wald interval with finite-population correction);
* ``p-IRT``        the same k random items + the model-based prediction (``predicted_score(method="model")``);
* ``gp-IRT``       tinyBenchmarks' combination lam * random-mean + (1 - lam) * p-IRT with
                   lam = b^2 / (b^2 + v_k): b^2 the p-IRT mean squared error and v_k the mean variance of
                   the random mean, both measured on the *other* folds' held-out LLMs (no interval);
* ``default``      the library's default: the session's default selection (``DoublyRobustSelection``,
                   every step a known-probability design draw; ``RandomisedSelection``, the same draws,
                   when the fold bank's own score check found the model-based accuracy worse than random
                   items' mean at its longest checked length), replayed ``--reps`` times like the other
                   random plans, + ``predicted_score()`` (the design-based estimate with the model as
                   its control variate);
* ``design``       ``RandomisedSelection`` + the design-based estimate (``method="design"``);
* ``rand+model``   the same randomised sessions scored by the model.

Printed per k: MAE of the accuracy, its ratio to random-mean's MAE ("xrand"), 95% interval coverage
and mean width. random-mean's MAE is its exact expectation over all k-item draws (hypergeometric,
per LLM), not the average over the ``--reps`` draws: with 2 draws per LLM that average moved the
ratios by up to 0.04 (its coverage and width are still measured on the draws). With several
``--seeds`` each seed is its own LLM fold partition (and calibration seed), and a last table pools
the replays of all of them: a single partition's ratio at 25 items varied by +-0.05 between
partitions in scratch runs; for MATH500 the same for the total CoT tokens over the 500 items (MAE and mean width divided
by the mean true total; 4 of the 158 LLMs recorded 0 tokens everywhere and are kept). Random
methods are repeated ``--reps`` times per LLM (different item draws).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from _paths import CHEMBENCH, PSN_IRT, exit_without_psn, lart_files  # noqa: E402

from calibration.common import Z95 as Z  # noqa: E402

LENGTHS = (10, 25, 50, 100)


def load(name, grouped=True):
    """The benchmark's ResponseData; MATH500 (a zero-shot and a one-shot run of each of 79 LLMs)
    with its runs grouped by LLM as the library's checks group them (``with_llm_groups``), so that
    every fold split here holds both runs of an LLM out together (``grouped=False``: each run alone)."""
    import calibration
    from calibration.heldout import with_llm_groups

    if name == "math500":
        accuracy, cot = lart_files("math500")
        data = calibration.load_responses(accuracy, cot=cot)
        return with_llm_groups(data)[0] if grouped else data
    if name == "chembench":
        return calibration.load_responses(CHEMBENCH / "responses_models_x_items.csv.gz", wide=True)
    if name == "psn":
        import pandas as pd

        m = pd.read_csv(exit_without_psn(PSN_IRT / "combine.csv.gz"), header=None).to_numpy()
        return calibration.ResponseData.from_arrays(m.astype(np.int8), subject_ids=[f"llm{i}" for i in range(m.shape[0])])
    raise ValueError(name)


def calibrate(name, train, seed, method=None):
    from calibration import CBMMCalibrator, LaRTSAEMCalibrator

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if (method or ("saem" if name == "math500" else "cbmm")) == "saem":
            return LaRTSAEMCalibrator(rng=seed).fit(train).to_item_bank(f"{name}_fold")
        return CBMMCalibrator(rng=seed, progress=False).fit(train).to_item_bank(f"{name}_fold")


def replay(bank, selector, estimator, y, cot, rng):
    """Run one session to max(LENGTHS) items; yield (k, session) at each checkpoint."""
    from catengine import CATSession
    from catengine.stopping import MaxItems

    s = CATSession(bank, selector=selector, estimator=estimator, stopping=MaxItems(max(LENGTHS)), rng=rng)
    index = bank.index_of
    for step in range(1, max(LENGTHS) + 1):
        item = s.next_item()
        j = index(item)
        s.record(item, int(y[j]), None if cot is None else float(cot[j]))
        if step in LENGTHS:
            yield step, s


def run_fold(name, data, test_rows, bank, reps, sd_scale, seed, use_cot=True):
    from catengine import CATSession
    from catengine.estimation import MAPEstimator
    from catengine.selection import RandomSelection, RandomisedSelection

    estimator = MAPEstimator(sd_scale=sd_scale, use_cot=use_cot)
    J = data.n_items
    rows = []
    default_selector = CATSession(bank).selector
    # a default that draws every step at random gets as many draws as the random plans
    drawn = isinstance(default_selector, RandomisedSelection) or getattr(default_selector, "share", 0.0) == 1.0
    default_reps = reps if drawn else 1
    for i in test_rows:
        y = data.correct[i].astype(float)
        cot = None if data.cot_length is None or bank.response_model != "lart" else data.cot_length[i]
        truth = float(y.mean())
        truth_cot = None if cot is None else float(np.sum(cot))
        base = {"llm": data.subject_ids[i], "truth": truth, "truth_cot": truth_cot}
        plans = [("default", None, default_reps)]
        plans += [("random", RandomSelection(), reps), ("randomised", RandomisedSelection(), reps)]
        for p_index, (plan, selector, n_rep) in enumerate(plans):
            for r in range(n_rep):
                rng = np.random.default_rng([seed, int(i), r, p_index])
                for k, s in replay(bank, selector, estimator, y, cot, rng):
                    model = s.predicted_score(method="model", by=False)
                    rec = {**base, "k": k, "rep": r}
                    if plan == "random":
                        answers = np.array([h.correct for h in s.history], dtype=float)
                        p = answers.mean()
                        fpc = 1.0 - k / J
                        se = math.sqrt(max(p * (1 - p) / (k - 1), 0.0) * fpc)
                        rows.append({**rec, "method": "random-mean", "est": p, "low": p - Z * se, "high": p + Z * se})
                        rows.append({**rec, "method": "p-IRT", "est": model.accuracy, "low": model.low, "high": model.high,
                                     "rand_var": p * (1 - p) / (k - 1) * fpc})
                        if cot is not None:
                            t = np.array([h.cot_length for h in s.history], dtype=float)
                            tot = J * t.mean()
                            tse = J * math.sqrt(t.var(ddof=1) / k * fpc)
                            rows[-2].update(cot=tot, cot_low=tot - Z * tse, cot_high=tot + Z * tse)
                            rows[-1].update(cot=model.cot_total, cot_low=model.cot_total_low, cot_high=model.cot_total_high)
                    elif plan == "default":
                        auto = s.predicted_score(by=False)
                        row = {**rec, "method": "default", "est": auto.accuracy, "low": auto.low, "high": auto.high,
                               "default_method": auto.method, "default_selector": s.selector.name}
                        if auto.cot_total is not None:
                            row.update(cot=auto.cot_total, cot_low=auto.cot_total_low, cot_high=auto.cot_total_high)
                        rows.append(row)
                    else:
                        d = s.predicted_score(method="design", by=False)
                        row = {**rec, "method": "design", "est": d.accuracy, "low": d.low, "high": d.high}
                        if d.cot_total is not None:
                            row.update(cot=d.cot_total, cot_low=d.cot_total_low, cot_high=d.cot_total_high)
                        rows.append(row)
                        row = {**rec, "method": "rand+model", "est": model.accuracy, "low": model.low, "high": model.high}
                        if model.cot_total is not None:
                            row.update(cot=model.cot_total, cot_low=model.cot_total_low, cot_high=model.cot_total_high)
                        rows.append(row)
    return rows


def add_gp_irt(rows, fold_of):
    """tinyBenchmarks' gp-IRT: lam from the other folds' p-IRT MSE and random-mean variance."""
    by_key = {}
    for r in rows:
        by_key.setdefault((r["method"], r["k"]), []).append(r)
    out = []
    folds = sorted(set(fold_of.values()))
    for k in LENGTHS:
        pirt = by_key.get(("p-IRT", k), [])
        mean = {(r["llm"], r["rep"]): r for r in by_key.get(("random-mean", k), [])}
        for f in folds:
            other = [r for r in pirt if fold_of[r["llm"]] != f]
            b2 = float(np.mean([(r["est"] - r["truth"]) ** 2 for r in other]))
            v = float(np.mean([r["rand_var"] for r in other]))
            lam = b2 / (b2 + v) if b2 + v > 0 else 0.5
            for r in pirt:
                if fold_of[r["llm"]] != f:
                    continue
                m = mean[(r["llm"], r["rep"])]
                est = lam * m["est"] + (1 - lam) * r["est"]
                out.append({**{k2: r[k2] for k2 in ("llm", "truth", "truth_cot", "k", "rep")}, "method": "gp-IRT",
                            "est": est, "low": math.nan, "high": math.nan, "lam": lam})
    return rows + out


METHOD_ORDER = ("random-mean", "p-IRT", "gp-IRT", "default", "design", "rand+model")


def summarise(name, rows, seconds, n_items, label=""):
    from catengine.scoring import random_mean_mae

    rows = [r for r in rows]
    print(f"\n== {name}{label}: {len({r['llm'] for r in rows})} held-out LLMs (cross-fitted), "
          f"{len(rows)} rows, {seconds:.0f} s ==")
    print(f"{'k':>4} {'method':<12} {'MAE':>7} {'xrand':>6} {'cover95':>8} {'width':>7}"
          + ("   {:>8} {:>8} {:>8}".format("CoT rMAE", "CoT cov", "CoT rwid") if rows[0]["truth_cot"] is not None else ""))
    table = {}
    for k in LENGTHS:
        base = None
        for m in METHOD_ORDER:
            rs = [r for r in rows if r["method"] == m and r["k"] == k]
            if not rs:
                continue
            err = np.array([r["est"] - r["truth"] for r in rs])
            mae = float(np.mean(np.abs(err)))
            if m == "random-mean":
                mae = float(np.mean([random_mean_mae(r["truth"], n_items, k) for r in rs]))
                base = mae
            low = np.array([r["low"] for r in rs])
            high = np.array([r["high"] for r in rs])
            truth = np.array([r["truth"] for r in rs])
            has_int = np.all(np.isfinite(low))
            cover = float(np.mean((low <= truth) & (truth <= high))) if has_int else math.nan
            width = float(np.mean(high - low)) if has_int else math.nan
            line = f"{k:>4} {m:<12} {mae:>7.4f} {mae / base:>6.2f} {cover:>8.3f} {width:>7.3f}"
            entry = {"mae": mae, "mae_ratio": mae / base, "coverage": cover, "width": width, "n": len(rs)}
            if rs[0]["truth_cot"] is not None and "cot" in rs[0]:
                tc = np.array([r["truth_cot"] for r in rs])
                c = np.array([r["cot"] for r in rs])
                cl = np.array([r["cot_low"] for r in rs])
                ch = np.array([r["cot_high"] for r in rs])
                rmae = float(np.sum(np.abs(c - tc)) / np.sum(tc))  # relative to the mean true total
                ccov = float(np.mean((cl <= tc) & (tc <= ch)))
                rwid = float(np.sum(ch - cl) / np.sum(tc))
                line += f"   {rmae:>8.3f} {ccov:>8.3f} {rwid:>8.3f}"
                entry.update(cot_rel_mae=rmae, cot_coverage=ccov, cot_rel_width=rwid)
            print(line)
            table[f"{k}/{m}"] = entry
    used = {}
    for r in rows:
        if r["method"] == "default" and r["k"] == LENGTHS[0]:
            key = f"{r.get('default_selector', '?')} + {r.get('default_method', 'model')}"
            used[key] = used.get(key, 0) + 1
    if used:
        print("default (selector + estimate) per held-out LLM: " + ", ".join(f"{k}: {v}" for k, v in sorted(used.items())))
        table["default_used"] = used
    return table


def run(name, folds, reps, sd_scale, seed, max_llms=None, use_cot=True, rows_out=None, method=None, grouped=True):
    from calibration.heldout import llm_folds

    t0 = time.perf_counter()
    data = load(name, grouped)
    n = data.n_subjects
    fold_rows = llm_folds(data.llm_groups, folds, seed)
    rows, fold_of = [], {}
    for f, test in enumerate(fold_rows):
        if max_llms is not None:
            test = test[:max_llms]
        train = np.setdiff1d(np.arange(n), fold_rows[f])
        tf = time.perf_counter()
        bank = calibrate(name, data.subset(subjects=train), seed + f, method)
        print(f"[{name}] fold {f + 1}/{folds}: bank from {train.size} LLMs in {time.perf_counter() - tf:.0f} s; "
              f"replaying {test.size}", file=sys.stderr, flush=True)
        for i in test:
            fold_of[data.subject_ids[i]] = f
        rows += run_fold(name, data, test, bank, reps, sd_scale, seed, use_cot)
    rows = add_gp_irt(rows, fold_of)
    if rows_out is not None:
        rows_out.extend({**r, "dataset": name, "seed": seed} for r in rows)
    return summarise(name, rows, time.perf_counter() - t0, data.n_items, f" (seed {seed})"), rows, data.n_items


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dataset", nargs="?", default="all", choices=("math500", "chembench", "psn", "all"))
    ap.add_argument("--folds", type=int, default=None, help="LLM folds (default: 5 for MATH500, 4 otherwise)")
    ap.add_argument("--reps", type=int, default=None, help="item draws per LLM for the random methods "
                    "(default: 2 for MATH500, 10 for ChemBench, 4 for PSN)")
    ap.add_argument("--sd-scale", type=float, default=1.0, help="the estimator's sd_scale (1: the model's SDs)")
    ap.add_argument("--seed", type=int, default=14)
    ap.add_argument("--seeds", default=None, help="comma-separated seeds, one LLM fold partition each, pooled at "
                    "the end (overrides --seed)")
    ap.add_argument("--max-llms", type=int, default=None, help="replay at most this many LLMs per fold (quick look)")
    ap.add_argument("--method", default=None, choices=("saem", "cbmm"),
                    help="calibration method (default: saem for MATH500, cbmm otherwise)")
    ap.add_argument("--no-cot", action="store_true", help="LaRT banks: score the answers alone (use_cot=False)")
    ap.add_argument("--ungrouped", action="store_true", help="MATH500: treat each run as its own LLM (a held-out "
                    "run's other-prompt sibling may then calibrate its bank, which flatters the figures)")
    ap.add_argument("--out", type=Path, default=None, help="write the summary tables (and every replay) as JSON here")
    args = ap.parse_args(argv)
    names = ("math500", "chembench", "psn") if args.dataset == "all" else (args.dataset,)
    defaults = {"math500": (5, 2), "chembench": (4, 10), "psn": (4, 4)}
    out, rows = {}, []
    for name in names:
        folds = args.folds or defaults[name][0]
        reps = args.reps or defaults[name][1]
        print(f"\n{name}: {folds} folds, {reps} random draws per LLM, sd_scale {args.sd_scale}")
        seeds = [int(x) for x in args.seeds.split(",")] if args.seeds else [args.seed]
        pooled, t0 = [], time.perf_counter()
        for seed in seeds:
            table, seed_rows, n_items = run(name, folds, reps, args.sd_scale, seed, args.max_llms, not args.no_cot,
                                            rows, args.method, not args.ungrouped)
            out[name if len(seeds) == 1 else f"{name}/seed{seed}"] = table
            pooled += seed_rows
        if len(seeds) > 1:
            out[f"{name}/pooled"] = summarise(name, pooled, time.perf_counter() - t0, n_items,
                                              f" (seeds {', '.join(map(str, seeds))} pooled)")
    if args.out is not None:
        args.out.write_text(json.dumps({"summary": out, "rows": rows}, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())
