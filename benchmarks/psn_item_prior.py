"""PSN slopes on few LLMs, with and without the training priors (docs/math.md §3.4).

``python benchmarks/psn_item_prior.py``: fits ``PSNCalibrator(item_prior=...)`` with its defaults
on ChemBench (22 LLMs x 2,854 items) and on random subsets of 17, 14, 14 and 12 of its LLMs
(rows drawn with seed 1); ``python benchmarks/psn_item_prior.py psn-irt`` on the PSN-IRT matrix
(``percent_0.7``: 12 LLMs x 29,309 items) and 11 of its LLMs. Prints per fit the standardised bank slopes (median, 99th
percentile, largest), the largest |intercept|, how many slopes are above 10 (flagged as runaway),
``converged_``, the last epoch's training loss and the epoch the prior joined (0: never).
"""

from __future__ import annotations

import sys
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from _paths import CHEMBENCH, PSN_IRT, exit_without_psn  # noqa: E402

HEADER = "LLMs  prior   seconds converged  |a| median / q99 / max  max|b|  n(|a|>10)  train loss  prior from epoch"


def fit_row(n: int, prior: str, seconds: float, cal) -> str:
    """The row of ``HEADER`` for a fitted ``PSNCalibrator`` on ``n`` LLMs: its standardised bank slopes
    (median, 99th percentile, largest), largest |intercept|, runaway slopes (|a| > 10), convergence,
    last training loss and the epoch the prior joined."""
    a, b = cal._bank_arrays(True)[:2]
    q = np.percentile(np.abs(a), [50, 99, 100])
    return (f"{n:4d}  {prior:<7} {seconds:7.1f} {str(cal.converged_):<9}  "
            f"{q[0]:6.2f} / {q[1]:5.2f} / {q[2]:5.2f}  {np.abs(b).max():6.1f}  {int((np.abs(a) > 10).sum()):9d}  "
            f"{cal.loss_trace_[-1]:.3f}       {cal.history_.prior_epoch}")


def main() -> int:
    from calibration.io import load_responses
    from calibration.methods.psn import PSNCalibrator

    warnings.simplefilter("ignore")
    if len(sys.argv) > 1 and sys.argv[1] == "psn-irt":
        from calibration import ResponseData

        Y = np.loadtxt(exit_without_psn(PSN_IRT / "percent_0.7.csv.gz"), delimiter=",").astype(np.int8)
        data, sizes = ResponseData.from_arrays(Y), (12, 11)
    else:
        data, sizes = load_responses(CHEMBENCH / "responses_models_x_items.csv.gz", wide=True), (22, 17, 14, 14, 12)
    g = np.random.default_rng(1)
    print(HEADER)
    for n in sizes:
        rows = np.sort(g.permutation(data.n_subjects)[:n])
        for prior in ("none", "normal"):
            t0 = time.perf_counter()
            cal = PSNCalibrator(rng=n, item_prior=prior).fit(data.subset(subjects=rows))
            print(fit_row(n, prior, time.perf_counter() - t0, cal))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
