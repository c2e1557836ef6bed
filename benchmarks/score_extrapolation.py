"""The default full-benchmark score for new LLMs unlike the calibration ones: strength-ordered and random splits.

``python benchmarks/score_extrapolation.py [math500-cbmm|math500-saem|amc23-saem|chembench|sim-guess|sim-4pl|
sim-twofactor|psn|all] [--reps 3] [--seed 0] [--splits strength-up,strength-down,random]
[--design opening=5,share=0.5,uniform_share=0.5] [--batch 10] [--lengths 10,25,50] [--bound] [--strength-edges 0.60,0.85]
[--exclude-flagged] [--oracle-control] [--variance-at-truth]``

Two splits of each shared data set, LLMs (with all their runs) on one side only:

* ``strength``: banks calibrated on the LLMs below the 60th percentile of full-benchmark accuracy,
  tested on the LLMs above the 85th (the new LLM is stronger than every calibration LLM); and
  the mirror image (bank above the 40th, tested below the 15th); ``--strength-edges 0.75,0.90``
  moves the two quantiles;
* ``random``: five folds of whole LLMs, each held out in turn.

Each bank is what a user gets from ``calibration fit`` (``CBMMCalibrator`` / ``LaRTSAEMCalibrator``
``.fit(...).to_item_bank`` with every default, including its own cross-fitted check, and the
calibration responses kept in the bank); each held-out LLM's recorded answers are replayed through
a default ``CATSession`` (``DoublyRobustSelection``: every step a known-probability design draw;
``--reps`` times, since it draws at random) and scored by the default ``predicted_score()`` (the
design-based estimate with the model as its control variate) after each checked length. Printed
per split and length: the MAE of the accuracy as a ratio to the exact expected MAE of the mean of
as many random items (``catengine.scoring.random_mean_mae``), the 95% interval's coverage and mean
width, the same for the model-only prediction (``method="model"``), for LaRT banks the CoT total's
coverage (with the side of the misses), median error and width over the true total, coverage by strength decile of
the held-out LLMs at every length (per kind of split, deciles of the held-out LLMs' true accuracy),
and how often the extrapolation flag fired: for held-out LLMs beyond the calibration LLMs' range of
accuracy, and for those inside the middle 80% of it. Data sets with fewer than 40 LLMs (ChemBench,
the PSN-IRT matrix) are also printed LLM by LLM for the strength split.

The simulated sets have guessing floors or a second ability, which the 2PL banks fitted to them
cannot represent: ``sim-guess`` 300 LLMs x 400 four-option items, P = c + (1 - c) logistic(a theta
+ b) with c = 0.25; ``sim-4pl`` floors c ~ U(0.15, 0.3) and ceilings d ~ U(0.85, 1); ``sim-twofactor``
a second, independent ability with loadings N(0, 1). ``--bound`` also prints, on the random splits
of banks with score factors, the error a design-unbiased estimator cannot beat: the Godambe-Joshi
lower bound on the anticipated variance of any design-unbiased estimator from k draws,
(1/J^2) [(sum_j s_j)^2 / k - sum_j s_j^2], s_j = sqrt(f_j (1 - f_j)) with f_j the bank's score-factor
probabilities at the held-out LLM's own full-benchmark mode (the model's best knowledge of it), as
an MAE (sqrt(2 / pi) times its root) over random items' exact MAE. ``--oracle-control``: beside the
default, the same estimator on the same draws (the same design probabilities, power tuning and
weights) with a control variate no session has: on the simulated sets the held-out LLM's *true*
answer probabilities, on real data with score factors the bank's probabilities at the LLM's own
full-benchmark mode; what a better model could add to the draws the default made; and the
Godambe-Joshi bound at those probabilities (the best design for them, which no session knows
either). ``--exclude-flagged`` (MATH500
and ChemBench) excludes from every session, before its first item, the items the shipped bank flags
(``grading_note``: 11 on MATH-500, 18 on ChemBench), as ``catengine run`` does by default; the truth
is then the accuracy over the other items. ``--variance-at-truth``: the variance that the default
accuracy interval's hypotheses give the estimate at each held-out LLM's true accuracy, against the
squared errors, and how often the truth lies within 1.96 of its SDs: whether a miss or an excess of
coverage comes from the variance's size or from the errors' shape.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _paths import CHEMBENCH, PSN_IRT, ROOT, lart_files, psn_missing  # noqa: E402

LENGTHS = {"math500": (10, 25, 50, 100), "amc23": (5, 10, 20), "chembench": (10, 25, 50, 100), "psn": (10, 25, 50),
           "sim": (10, 25, 50)}
SETS = ("math500-cbmm", "math500-saem", "amc23-saem", "chembench", "sim-guess", "sim-4pl", "sim-twofactor", "psn")
SIMULATED = {"sim-guess": "guess", "sim-4pl": "4pl", "sim-twofactor": "twofactor"}


def simulate(kind, seed=2024, n_llms=300, n_items=400, with_probabilities=False):
    """A response matrix from a model the 2PL banks cannot represent (module docstring); with
    ``with_probabilities``, (the data, the (LLMs, items) true answer probabilities)."""
    from scipy.special import expit

    import calibration

    rng = np.random.default_rng([seed, list(SIMULATED.values()).index(kind)])
    a = rng.uniform(0.6, 2.0, n_items)
    b = rng.normal(0.0, 1.3, n_items)
    theta = rng.normal(0.0, 1.0, n_llms)
    if kind == "guess":
        p = 0.25 + 0.75 * expit(np.outer(theta, a) + b)
    elif kind == "4pl":
        c, d = rng.uniform(0.15, 0.3, n_items), rng.uniform(0.85, 1.0, n_items)
        p = c + (d - c) * expit(np.outer(theta, a) + b)
    else:
        a2, eta = rng.normal(0.0, 1.0, n_items), rng.normal(0.0, 1.0, n_llms)
        p = expit(np.outer(theta, a) + np.outer(eta, a2) + b)
    y = (rng.random(p.shape) < p).astype(np.int8)
    data = calibration.ResponseData.from_arrays(y, subject_ids=[f"llm{i:03d}" for i in range(n_llms)],
                                                item_ids=[f"q{j:03d}" for j in range(n_items)])
    return (data, p) if with_probabilities else data


def load(benchmark):
    import calibration
    from calibration.heldout import with_llm_groups

    if benchmark in SIMULATED:
        return simulate(SIMULATED[benchmark])
    if benchmark in ("math500", "amc23"):
        acc, cot = lart_files(benchmark)
        return with_llm_groups(calibration.load_responses(acc, cot=cot))[0]
    if benchmark == "chembench":
        return calibration.load_responses(CHEMBENCH / "responses_models_x_items.csv.gz", wide=True)
    import pandas as pd

    m = pd.read_csv(PSN_IRT / "combine.csv.gz", header=None).to_numpy()
    return calibration.ResponseData.from_arrays(m.astype(np.int8), subject_ids=[f"llm{i}" for i in range(m.shape[0])])


def fit_bank(train, method, seed):
    """The bank ``calibration fit`` writes: every default, the calibration responses kept (the standing
    compares a session's answers with them)."""
    from calibration import CBMMCalibrator, LaRTSAEMCalibrator

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if method == "saem":
            bank = LaRTSAEMCalibrator(rng=seed).fit(train).to_item_bank("extrapolation_check")
        else:
            bank = CBMMCalibrator(rng=seed, progress=False).fit(train).to_item_bank("extrapolation_check")
    return bank.with_group("responses", train.to_dataset())


def answers(data):
    """The correctness matrix as floats, NaN where an LLM has no answer."""
    from catengine.responses.data import MISSING

    return np.where(data.correct == MISSING, np.nan, data.correct.astype(float))


def llm_groups(data):
    groups = np.asarray(data.subject_groups) if data.subject_groups is not None else np.asarray(data.subject_ids)
    names = np.unique(groups)
    accuracy = np.nanmean(answers(data), axis=1)
    group_accuracy = np.array([accuracy[groups == g].mean() for g in names])
    return groups, names, group_accuracy, accuracy


STRENGTH_EDGES = (0.60, 0.85)


def splits(data, seed, edges=STRENGTH_EDGES):
    """(name, calibration rows, held-out rows) of every split; ``edges`` (bank, test): the strength-up
    bank is fitted below the first accuracy quantile and tested above the second, the strength-down
    one above 1 - first and tested below 1 - second."""
    groups, names, group_acc, _ = llm_groups(data)
    bank_edge, test_edge = edges
    up_bank, up_test = np.quantile(group_acc, [bank_edge, test_edge])
    down_test, down_bank = np.quantile(group_acc, [1.0 - test_edge, 1.0 - bank_edge])
    rows = lambda g: np.flatnonzero(np.isin(groups, g))  # noqa: E731
    out = [("strength-up", rows(names[group_acc < up_bank]), rows(names[group_acc > up_test])),
           ("strength-down", rows(names[group_acc > down_bank]), rows(names[group_acc < down_test]))]
    perm = np.random.default_rng(seed).permutation(names)
    for k, fold in enumerate(np.array_split(perm, 5)):
        out.append((f"random-{k}", rows(np.setdiff1d(names, fold)), rows(fold)))
    return out


def flagged_items(benchmark, data) -> np.ndarray:
    """The data's item indices that the shipped bank of ``benchmark`` flags (``grading_note``), which
    ``catengine run`` leaves out; the bank's ids are the data's with a ``<benchmark>/`` prefix."""
    from catengine.cli.options import open_bank

    shipped = {"math500": "math500_2pl", "chembench": "chembench_2pl"}.get(benchmark)
    if shipped is None:
        raise SystemExit(f"--exclude-flagged: no shipped bank flags items of {benchmark}")
    bank = open_bank(ROOT / "item_banks" / shipped)
    flagged = {c.item.partition("/")[2] for c in bank.contents() if c.grading_note}
    return np.flatnonzero([str(i) in flagged for i in data.item_ids])


def replay(bank, y, cot, lengths, rng, design=None, batch=1, excluded=()):
    from catengine import CATSession
    from catengine.selection import DoublyRobustSelection, RandomisedSelection
    from catengine.stopping import MaxItems

    # the default selector (DoublyRobustSelection, or RandomisedSelection where the bank's check says so);
    # ``design``: other settings of DoublyRobustSelection where that is the default (--design);
    # ``batch`` > 1: proposals in batches of that many (CATSession.next_items, as the harnesses run them),
    # answered in proposal order, the score checked after every answer
    s = CATSession(bank, stopping=MaxItems(max(lengths)), rng=rng)
    if design and isinstance(s.selector, DoublyRobustSelection):
        settings = dict(design)
        if "uniform_share" in settings:  # the design draws' uniform floor (RandomisedSelection.uniform_share)
            settings["design"] = RandomisedSelection(uniform_share=settings.pop("uniform_share"))
        s = CATSession(bank, selector=DoublyRobustSelection(**settings), stopping=MaxItems(max(lengths)), rng=rng)
    index = bank.index_of
    for j in excluded:
        s.exclude(bank.item_ids[j])
    step = 0
    while step < max(lengths):
        for item in (s.next_items(batch) if batch > 1 else [s.next_item()]):
            step += 1
            j = index(item)
            if not np.isfinite(y[j]):
                s.exclude(item)
                continue
            s.record(item, int(y[j]), None if cot is None else float(cot[j]))
            if step in lengths:
                yield step, s


def variance_at_truth(session, truth):
    """(A^, V(truth)): the unprojected estimate and the variance the test-inverted interval's
    hypotheses give it at the true accuracy (docs/math.md §7.8); None on a bank without them."""
    from catengine.scoring.design import draw_weights
    from catengine.session.scoring import design_parts, tests_hypotheses

    if not tests_hypotheses(session.params):
        return None
    parts = design_parts(session, by=False)
    w = draw_weights(parts["terms"].shape[0], int(parts["sizes"][0]))
    variances = (w**2) @ parts["hypothesis_variances"][:, :, 0]
    return float(parts["terms"][:, 0] @ w), float(np.interp(truth, parts["hypothesis_accuracies"][:, 0], variances))


def run_set(name, reps, seed, kinds=None, design=None, batch=1, lengths=None, bound=False, edges=STRENGTH_EDGES,
            exclude_flagged=False, oracle=False, at_truth=False):
    from catengine.scoring import random_mean_mae

    if name in SIMULATED:
        benchmark, method, key = name, "cbmm", "sim"
    else:
        benchmark, _, method = name.partition("-")
        method, key = method or "cbmm", benchmark
    data = load(benchmark)
    truth_p = simulate(SIMULATED[benchmark], with_probabilities=True)[1] if oracle and name in SIMULATED else None
    lengths = tuple(lengths or LENGTHS[key])
    _, _, _, accuracy = llm_groups(data)
    Y = answers(data)
    excluded = flagged_items(benchmark, data) if exclude_flagged else np.zeros(0, dtype=np.int64)
    kept = np.setdiff1d(np.arange(data.n_items), excluded)
    J = kept.size
    records, bounds = [], []
    t0 = time.perf_counter()
    for split, train, test in splits(data, seed, edges):
        if kinds is not None and ("random" if split.startswith("random") else split) not in kinds:
            continue
        if test.size == 0 or train.size == 0:  # e.g. more than 15% of the LLMs tie at accuracy 0: none strictly below
            print(f"  {name} {split}: no LLMs on one side of the split (ties at its quantile); skipped", flush=True)
            continue
        bank = fit_bank(data.subset(subjects=train), method, seed)
        cal_acc = accuracy[train]
        cal_lo, cal_hi = float(cal_acc.min()), float(cal_acc.max())
        mid_lo, mid_hi = np.quantile(cal_acc, [0.1, 0.9])
        for i in test:
            y = Y[i]
            cot = None if data.cot_length is None or bank.response_model != "lart" else data.cot_length[i]
            truth = float(np.nanmean(y[kept]))
            if bound and split.startswith("random") and bank.score_factors is not None and np.all(np.isfinite(y)):
                bounds.append(design_bound(bank, y, lengths))
            best = truth_p[i] if truth_p is not None else None
            if oracle and best is None and bank.score_factors is not None and np.all(np.isfinite(y)) and not excluded.size:
                best = mode_probabilities(bank, y)  # real data: the model at the LLM's own full-benchmark mode
            for r in range(reps):
                rng = np.random.default_rng([seed, int(i), r])
                for k, s in replay(bank, y, cot, lengths, rng, design, batch, excluded):
                    auto = s.predicted_score(by=False)
                    model = s.predicted_score(method="model", by=False)
                    records.append({
                        "split": split.split("-")[0] if split.startswith("random") else split, "llm": data.subject_ids[i],
                        "k": k, "truth": truth, "rand": random_mean_mae(truth, J, k),
                        "est": auto.accuracy, "low": auto.low, "high": auto.high, "method": auto.method,
                        "m_est": model.accuracy, "m_low": model.low, "m_high": model.high,
                        "flag": auto.extrapolation, "beyond": truth > cal_hi or truth < cal_lo,
                        "middle": mid_lo <= truth <= mid_hi,
                    })
                    if auto.cot_total is not None and cot is not None and np.all(np.isfinite(cot[kept])):
                        records[-1]["cot"] = (float(np.sum(cot[kept])), auto.cot_total, auto.cot_total_low,
                                              auto.cot_total_high)
                    if at_truth and auto.method != "model":
                        records[-1]["at_truth"] = variance_at_truth(s, truth)
                    if best is not None:
                        records[-1]["oracle"] = oracle_control_estimate(s, best)
                        records[-1]["oracle_bound"] = godambe_joshi_mae(best, k)
        print(f"  {name} {split}: bank from {train.size} runs (accuracy {cal_lo:.3f}-{cal_hi:.3f}), "
              f"{test.size} held out ({accuracy[test].min():.3f}-{accuracy[test].max():.3f}), "
              f"{time.perf_counter() - t0:.0f} s", flush=True)
    return records, lengths, data.n_subjects, bounds


def mode_probabilities(bank, y) -> np.ndarray:
    """The bank's score-factor probabilities of every item at the mode given all of one LLM's answers
    ``y``: the model's best knowledge of that LLM, better than any session has."""
    sf = bank.score_factors
    mode, _ = sf.posterior(np.arange(y.size), y.astype(float))
    return sf.probabilities(mode[None, :])[0]


def design_bound(bank, y, lengths):
    """Per length k: (the Godambe-Joshi bound's MAE, random items' exact MAE) for one held-out LLM
    with answers ``y`` (module docstring): the score factors at the LLM's own full-benchmark mode."""
    from catengine.scoring import random_mean_mae

    f = mode_probabilities(bank, y)
    truth = float(y.mean())
    return [(godambe_joshi_mae(f, k), random_mean_mae(truth, y.size, k)) for k in lengths]


def oracle_control_estimate(session, probabilities) -> float:
    """The default estimator on ``session``'s own draws (design probabilities, predictable power tuning,
    draw weights, projection) with ``probabilities`` (J,), the LLM's true answer probabilities, as
    the control variate of every draw in place of the bank's predictions (``--oracle-control``)."""
    from catengine.scoring import design_estimate, design_terms
    from catengine.scoring.design import draw_weights
    from catengine.scoring.doubly_robust import aipw_terms
    from catengine.session.scoring import design_draws, known_draws, recorded_answers

    h, order, correct = recorded_answers(session)
    steps, contexts = design_draws(session)
    is_draw = np.zeros(len(h), dtype=bool)
    is_draw[steps] = True
    prob = np.array([r.criterion for r in h], dtype=float)
    J = probabilities.size
    predictions = np.broadcast_to(np.asarray(probabilities, dtype=float), (steps.size, J))
    without = design_terms(order, correct, is_draw, prob, np.zeros_like(predictions))
    with_truth = design_terms(order, correct, is_draw, prob, predictions)
    terms, _ = aipw_terms(without, with_truth, known_draws(order, steps, contexts))
    known = float(correct.sum())
    return design_estimate(terms[:, 0] * J, n_items=J, bounds=(known, known + J - order.size),
                           weights=draw_weights(steps.size, J)).mean / J


def godambe_joshi_mae(probabilities, k) -> float:
    """The Godambe-Joshi bound (module docstring) at the true answer probabilities, as an MAE."""
    sd = np.sqrt(probabilities * (1.0 - probabilities))
    return float(np.sqrt(2.0 / np.pi) * np.sqrt(max(sd.sum() ** 2 / k - np.sum(sd * sd), 0.0)) / sd.size)


def _decile_coverage(part):
    truths = np.array([r["truth"] for r in part])
    edges = np.quantile(truths, np.linspace(0, 1, 11))
    dec = np.clip(np.searchsorted(edges, truths, side="right") - 1, 0, 9)
    covered = np.array([r["low"] <= r["truth"] <= r["high"] for r in part])
    return " ".join(f"{covered[dec == d].mean():.2f}" if np.any(dec == d) else "-" for d in range(10))


def summarise(name, records, lengths, n_subjects, bounds=()):
    print(f"\n== {name}: default predicted_score() (and method='model'); MAE as x the mean of as many random items")
    print(f"{'split':14s} {'k':>4s} {'n':>5s} {'MAE x rand':>10s} {'cover':>6s} {'width':>6s} | {'model x':>8s} {'cover':>6s}  estimators")
    for split in ("strength-up", "strength-down", "random"):
        for k in lengths:
            rows = [r for r in records if r["split"] == split and r["k"] == k]
            if not rows:
                continue
            err = np.mean([abs(r["est"] - r["truth"]) for r in rows])
            merr = np.mean([abs(r["m_est"] - r["truth"]) for r in rows])
            base = np.mean([r["rand"] for r in rows])
            cov = np.mean([r["low"] <= r["truth"] <= r["high"] for r in rows])
            mcov = np.mean([r["m_low"] <= r["truth"] <= r["m_high"] for r in rows])
            width = np.mean([r["high"] - r["low"] for r in rows])
            methods = sorted({r["method"] for r in rows})
            print(f"{split:14s} {k:4d} {len(rows):5d} {err / base:10.2f} {cov:6.3f} {width:6.3f} | {merr / base:8.2f} {mcov:6.3f}  {','.join(methods)}")
            tested = np.array([(r["at_truth"][0] - r["truth"], r["at_truth"][1]) for r in rows if r.get("at_truth")])
            if tested.size:
                err, var = tested.T
                print(f"{'':14s} {'':4s} {'':5s} the hypotheses' variance at the true accuracy: {var.mean() / np.mean(err**2):.2f}x "
                      f"the mean squared error; the truth within 1.96 of its SDs {np.mean(np.abs(err) <= 1.96 * np.sqrt(var)):.3f}")
            oracle = [r for r in rows if "oracle" in r]
            if oracle:
                oerr = np.mean([abs(r["oracle"] - r["truth"]) for r in oracle]) / np.mean([r["rand"] for r in oracle])
                print(f"{'':14s} {'':4s} {'':5s} {oerr:10.2f}  (the same draws, the best-known probabilities as control); "
                      f"bound at them {np.mean([r['oracle_bound'] for r in oracle]) / np.mean([r['rand'] for r in oracle]):.2f}")
    cot_rows = [r for r in records if "cot" in r]
    if cot_rows:
        print("CoT total (LaRT banks): 95% interval's coverage, misses with the truth above / below it, "
              "median error and width over the true total")
        for split in ("strength-up", "strength-down", "random"):
            for k in lengths:
                c = np.array([r["cot"] for r in cot_rows if r["split"] == split and r["k"] == k])
                if c.size == 0:
                    continue
                truth, est, low, high = c.T
                positive = truth > 0
                print(f"{split:14s} {k:4d} {len(c):5d} cover {np.mean((low <= truth) & (truth <= high)):.3f} "
                      f"(above {np.mean(high < truth):.3f}, below {np.mean(low > truth):.3f}) "
                      f"median error {np.median(np.abs(est - truth)[positive] / truth[positive]):.2f} "
                      f"median width {np.median((high - low)[positive] / truth[positive]):.2f}")
    if bounds:
        b = np.array(bounds)  # (LLM, length, (bound, random))
        print("design-unbiased bound on the random splits (Godambe-Joshi, the model at each LLM's full-benchmark "
              "mode), MAE x random: " + " / ".join(f"k={k} {b[:, t, 0].mean() / b[:, t, 1].mean():.2f}"
                                                     for t, k in enumerate(lengths)))
    if n_subjects < 40:
        print("LLM by LLM (strength splits, longest length):")
        k = lengths[-1]
        for r in records:
            if r["split"].startswith("strength") and r["k"] == k:
                print(f"  {r['split']:14s} {r['llm'][:40]:40s} truth {r['truth']:.3f} est {r['est']:.3f} "
                      f"[{r['low']:.3f}, {r['high']:.3f}] flag {r['flag'] or '-'}")
    for k in lengths:
        rows = [r for r in records if r["k"] == k]
        for kind in ("strength", "random"):
            part = [r for r in rows if r["split"].startswith(kind)]
            if part:
                print(f"coverage by strength decile of the held-out LLMs ({kind} splits, k={k}): {_decile_coverage(part)}")
    for k in lengths:
        rows = [r for r in records if r["k"] == k]
        beyond = [r for r in rows if r["beyond"]]
        middle = [r for r in rows if r["middle"]]
        print(f"extrapolation flag at k={k}: fired for "
              f"{np.mean([bool(r['flag']) for r in beyond]) if beyond else float('nan'):.2f} "
              f"of {len(beyond)} replays of LLMs beyond the calibration range, "
              f"{np.mean([bool(r['flag']) for r in middle]) if middle else float('nan'):.2f} of {len(middle)} inside its middle 80%")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sets", nargs="?", default="all", choices=SETS + ("all",))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--design", default=None, help="settings of the default DoublyRobustSelection to measure instead, "
                    "e.g. opening=0,share=1.0; uniform_share=1.0: the design draws' uniform floor "
                    "(RandomisedSelection.uniform_share; 1.0 draws every item alike)")
    ap.add_argument("--splits", default=None, help="comma-separated kinds of split to run (strength-up, strength-down, random); default all")
    ap.add_argument("--batch", type=int, default=1, help="propose items in batches of this many (CATSession.next_items, "
                    "as the Inspect and lm-eval harnesses do); default 1 (one at a time)")
    ap.add_argument("--lengths", default=None, help="comma-separated test lengths to check (default: per data set)")
    ap.add_argument("--bound", action="store_true", help="also print the design-unbiased bound on the random splits")
    ap.add_argument("--exclude-flagged", action="store_true",
                    help="exclude the shipped bank's flagged items from every session, as catengine run does (MATH500, ChemBench)")
    ap.add_argument("--variance-at-truth", action="store_true",
                    help="also the test-inverted interval's variance at each LLM's true accuracy against the squared errors")
    ap.add_argument("--oracle-control", action="store_true", help="also the same estimator and draws with each LLM's "
                    "true answer probabilities (simulated sets; real data: the bank at its own full mode) as control "
                    "variate, and the bound at them")
    ap.add_argument("--strength-edges", default="0.60,0.85", help="accuracy quantiles of the strength split: the bank "
                    "below the first, tested above the second (the mirror image for strength-down); default 0.60,0.85")
    args = ap.parse_args(argv)
    chosen = SETS if args.sets == "all" else (args.sets,)
    for name in chosen:
        if name == "psn" and psn_missing() is not None:
            print(f"psn: skipped ({psn_missing()})")
            continue
        t0 = time.perf_counter()
        kinds = None if args.splits is None else set(args.splits.split(","))
        design = None
        if args.design:
            design = {}
            for pair in args.design.split(","):
                key, _, value = pair.partition("=")
                design[key.strip()] = int(value) if key.strip() == "opening" else float(value)
        lengths = None if args.lengths is None else [int(x) for x in args.lengths.split(",")]
        edges = tuple(float(x) for x in args.strength_edges.split(","))
        if len(edges) != 2 or not 0.0 < edges[0] <= edges[1] < 1.0:
            ap.error(f"--strength-edges takes two quantiles 0 < bank <= test < 1, got {args.strength_edges!r}")
        records, lengths, n, bounds = run_set(name, args.reps, args.seed, kinds, design, args.batch, lengths, args.bound,
                                              edges, args.exclude_flagged, args.oracle_control,
                                              args.variance_at_truth)
        summarise(name, records, lengths, n, bounds)
        print(f"({name}: {time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
