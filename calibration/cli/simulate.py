"""``calibration simulate``: draw a response file of simulated LLMs from a bank's parameters.

    calibration simulate --bank DIR|FILE --subjects N --out FILE.nc|FILE.jsonl
                         [--ability normal|skew-normal|bimodal|student-t] [--missing mcar|mar|mnar
                         --missing-rate R] [--cot-cap TOKENS] [--prefix NAME] [--seed S]

Useful to try the calibration, recalibration and audit workflows without real data.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ABILITY_CHOICES = ("normal", "skew-normal", "bimodal", "student-t")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bank", required=True, help="bank directory (latest version) or bank file")
    parser.add_argument("--subjects", type=int, required=True, help="number of simulated LLMs")
    parser.add_argument("--out", required=True, help="output file: .nc (ResponseData netCDF) or .jsonl (long table)")
    parser.add_argument("--ability", choices=ABILITY_CHOICES, default="normal", help="ability distribution (standardised)")
    parser.add_argument("--missing", choices=("mcar", "mar", "mnar"), default=None, help="missingness mechanism")
    parser.add_argument("--missing-rate", type=float, default=0.0, help="share of missing cells (with --missing)")
    parser.add_argument("--cot-cap", type=float, default=None, help="right-censor CoT lengths at this many tokens (lart banks)")
    parser.add_argument("--prefix", default="sim", help="subject ids are PREFIX0, PREFIX1, ... (default sim)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")


def _write_jsonl(data, path: Path) -> None:
    from catengine.atomic import atomic_output

    with atomic_output(path) as tmp, open(tmp, "w") as fh:
        for row in data.to_long(drop_missing=True):
            fh.write(json.dumps(row) + "\n")


def run(args) -> int:
    import numpy as np

    from calibration.simulate import draw_abilities, simulate_responses
    from catengine import open_item_bank

    out = Path(args.out)
    if out.suffix not in (".nc", ".jsonl"):
        print(f"calibration simulate: error: --out must end in .nc or .jsonl, got {out.name}", file=sys.stderr)
        return 2
    if args.subjects < 1:
        print(f"calibration simulate: error: --subjects must be >= 1, got {args.subjects}", file=sys.stderr)
        return 2
    try:
        bank = open_item_bank(args.bank)
        rng = np.random.default_rng(args.seed)
        theta = draw_abilities(args.subjects, args.ability, rng=rng)
        data = simulate_responses(
            bank.params, theta, rng=rng, missing=args.missing, missing_rate=args.missing_rate,
            cot_cap=args.cot_cap, cot_offset=bank.effective_cot_offset,
            subject_ids=[f"{args.prefix}{k}" for k in range(args.subjects)], item_ids=bank.item_ids,
        )
        out.parent.mkdir(parents=True, exist_ok=True)
        if out.suffix == ".nc":
            data.to_netcdf(out)
        else:
            _write_jsonl(data, out)
    except (ValueError, OSError) as exc:
        print(f"calibration simulate: error: {exc}", file=sys.stderr)
        return 2
    print(f"{data.n_subjects} simulated LLMs x {data.n_items} items from {bank.source} -> {out}", file=sys.stderr)
    print(out)
    return 0
