"""Build the shipped demo item bank ``item_banks/demo_math500_lart``.

A LaRT bank of 500 simulated items whose parameter distributions were chosen to resemble the
MATH500 data of the LaRT paper (158 LLMs x 500 items, data/lart):

* item accuracy over the LLMs there has quantiles 5/50/95% = 0.08 / 0.53 / 0.68: with probit
  slopes a ~ LogNormal(0.3, 0.35) and intercepts b ~ Normal(-0.05, 0.8) the marginal accuracy
  Phi(b / sqrt(1 + a^2)) spreads the same way;
* log(T + 1) has a grand mean of 6.43 with per-item means 5.9-7.0 and per-item SDs 2.0-2.4:
  omega ~ Normal(6.4, 0.35), phi ~ Uniform(1.5, 2.5), lam ~ Uniform(0.8, 1.4) give
  sqrt(phi^2 + lam^2) ~ 2.3;
* abler LLMs write longer chains there (rho < 0): rho = -0.6.

No response of the real data is copied: only these summary statistics informed the design.

Usage:
    python scripts/build_demo_bank.py            # writes the next version (never overwrites)
    python scripts/build_demo_bank.py --check    # rebuilds in memory and compares to the latest shipped version
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import xarray as xr

from catengine import ItemBank, open_item_bank, write_item_bank

BANK_ID = "demo_math500_lart"
SEED = 20261129
N_ITEMS = 500
SUBJECT_AREAS = (
    "Algebra", "Counting & Probability", "Geometry", "Intermediate Algebra",
    "Number Theory", "Prealgebra", "Precalculus",
)
DESIGN = {
    "a": "LogNormal(0.3, 0.35)",
    "b": "Normal(-0.05, 0.8)",
    "omega": "Normal(6.4, 0.35)",
    "phi": "Uniform(1.5, 2.5)",
    "lam": "Uniform(0.8, 1.4)",
    "rho": -0.6,
    "subject_area": "uniform over the 7 MATH subject areas",
    "seed": SEED,
}


CARD = {  # the bank card (root attributes; `catengine banks` shows it)
    "benchmark": "MATH500-like (simulated)",
    "description": "simulated LaRT items whose parameter distributions resemble the MATH500 fit",
    "source": '{"dataset": "simulated by scripts/build_demo_bank.py (no real response copied)"}',
    "license": "MIT",
    "calibration_date": "2026-11-29",
    "item_id_scheme": "demo_<k>: k = the item's draw order (000..499)",
    "build_script": "scripts/build_demo_bank.py",
}


def build_demo_bank() -> ItemBank:
    rng = np.random.default_rng(SEED)
    a = rng.lognormal(0.3, 0.35, N_ITEMS)
    b = rng.normal(-0.05, 0.8, N_ITEMS)
    omega = rng.normal(6.4, 0.35, N_ITEMS)
    phi = rng.uniform(1.5, 2.5, N_ITEMS)
    lam = rng.uniform(0.8, 1.4, N_ITEMS)
    areas = rng.choice(SUBJECT_AREAS, N_ITEMS)
    return ItemBank.from_params(
        "lart",
        [f"demo_{k:03d}" for k in range(N_ITEMS)],
        bank_id=BANK_ID,
        calibration_method="simulation",
        calibration_settings={"script": "scripts/build_demo_bank.py", "design": DESIGN},
        n_subjects=0,
        scale={"theta": "standard normal population (model-defined)", "tau": "standard normal population"},
        rho=DESIGN["rho"],
        cot_offset=1.0,
        a=a, b=b, omega=omega, phi=phi, lam=lam,
        item_metadata={"benchmark": ["math500-like"] * N_ITEMS, "subject_area": areas},
    ).replace_attrs(**CARD)


def default_directory() -> Path:
    return Path(__file__).resolve().parents[1] / "item_banks" / BANK_ID


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=default_directory(), help="bank directory")
    parser.add_argument("--check", action="store_true", help="compare a rebuild with the latest stored version")
    args = parser.parse_args(argv)
    bank = build_demo_bank()
    if args.check:
        stored = open_item_bank(args.out)
        xr.testing.assert_identical(stored.items, bank.items)
        print(f"{stored.source} matches a fresh build")
        return 0
    print(write_item_bank(bank, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
