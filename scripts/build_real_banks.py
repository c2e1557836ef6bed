"""Build the shipped real item banks from the public data in the repository's ``data/``.

Four banks, each calibrated with the library's default calibration path
(``Calibrator(rng=SEED).fit(data).to_item_bank(bank_id)``) and shipped with its calibration
responses (so that it can be recalibrated) and a *bank card* in its root attributes:

==================  =====================================================  ==========  ==========
bank id             data                                                    model       method
==================  =====================================================  ==========  ==========
``math500_lart``    LaRT paper, MATH500: 158 LLM runs x 500 items, CoT      lart        saem
``math500_2pl``     the same answers (CoT lengths unused)                   2pl         cbmm
``amc23_lart``      LaRT paper, AMC23: 156 LLM runs x 40 items, CoT         lart        saem
``chembench_2pl``   ChemBench via irt-on-bench: 22 LLMs x 2,854 items       2pl         cbmm
==================  =====================================================  ==========  ==========

Item ids say which benchmark and which item they are: ``<benchmark>/<k>`` with ``k`` the item's
position in the source file (``math500/17`` is column ``17`` of ``data/accuracy_math500.csv`` of
the LaRT repository, i.e. the 18th MATH500 problem in that file's order; ``chembench/17`` is row
17 of ``results/binary_matrix.csv`` of irt-on-bench). ChemBench items carry their human
``difficulty`` label (easy / intermediate / hard) from ``data/difficulty_dict.json`` as item
metadata.

The bank card (root attributes; :func:`catengine.bank_card` reads it back as a dict):
``benchmark``, ``source`` (JSON: dataset, paper, repository, commit, paths), ``license`` (SPDX
id) and ``license_text`` (the upstream notice, which the MIT license asks to ship with copies),
``n_subjects``, ``calibration_method``, ``calibration_date`` (fixed here, not the wall clock, so
that a rebuild is reproducible), ``item_id_scheme`` and ``replay_audit`` (JSON): the coverage of
the adaptive 95% intervals on the real LLMs, cross-fitted over LLMs
(``calibration.audit.replay_audit``, 4 folds, the bank's default selector and random items), by
test length. The LaRT data holds a zero-shot and a one-shot run of each LLM (158 runs of 79 LLMs
on MATH500): both runs of an LLM are always held out together, in the audit and in every check the
calibration runs (``calibration.folds.with_llm_groups`` finds the run suffixes; the stored responses
carry the groups).

Usage (from the repository root; the data folder defaults to ``data/``, where each source file is
stored gzip-compressed; ``--data`` also reads an uncompressed copy):
    python scripts/build_real_banks.py                  # writes the next version of all four banks
    python scripts/build_real_banks.py chembench_2pl    # one bank
    python scripts/build_real_banks.py --check          # refit and compare with the latest shipped versions
    python scripts/build_real_banks.py --data DIR --out DIR --workers 2
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT / "data"
CALIBRATION_DATE = "2026-12-01"  # bumped by hand when the banks are recalibrated
SEED = 20261201
REPLAY_FOLDS = 4
#: parameter agreement a rebuild must reach (--check and tests/test_real_banks.py)
PARAMETER_ATOL = {"cbmm": 1e-6, "saem": 1e-6}


@dataclass(frozen=True)
class Recipe:
    bank_id: str
    benchmark: str
    method: str  # "saem" | "cbmm"
    folder: str  # under the data root
    files: tuple[str, ...]  # accuracy [, CoT] (wide: rows LLMs, header item positions)
    prefix: str  # item id namespace
    source: dict
    license: str
    item_id_scheme: str
    replay_lengths: tuple[int, ...]
    description: str


LART_SOURCE = {
    "dataset": "LaRT paper data (vLLM, temperature 0.5, top-p 0.95, max 10,240 output tokens; zero- and one-shot prompts)",
    "paper": "Xu, Liu, Wang, Gu, 'Latency-Response Theory Model: Evaluating Large Language Models via Response "
             "Accuracy and Chain-of-Thought Length', arXiv:2512.07019",
    "repository": "https://github.com/Toby-X/Latency-Response-Theory-Model",
    "commit": "8e5d71bae876c00cef7ec765097dfdbc4803e4af",
}
CHEMBENCH_SOURCE = {
    "dataset": "ChemBench item-level correctness ('all_correct' metric) of 22 LLMs, via irt-on-bench",
    "paper": "Mirza et al., 'A framework for evaluating the chemical knowledge and reasoning abilities of large "
             "language models against the expertise of chemists', Nature Chemistry (2025); ChemBench",
    "repository": "https://github.com/lamalab-org/irt-on-bench",
    "commit": "a914cea87f9577dafdc9381b1cbfa685007ccbeb",
}


def lart_paper_recipe(benchmark: str, n_items: int, n_runs: int, replay_lengths: tuple[int, ...], *, cot: bool) -> Recipe:
    """The bank of one benchmark of the LaRT paper's data (folder ``lart``, files
    ``accuracy_<name>.csv`` and ``cot_length_<name>.csv``): LaRT by SAEM on the answers and their
    CoT lengths (``cot``), else a 2PL by cBMM on the answers alone."""
    name = benchmark.lower()
    files = (f"accuracy_{name}.csv", f"cot_length_{name}.csv") if cot else (f"accuracy_{name}.csv",)
    fitted_by = (f"LaRT (accuracy + chain-of-thought length) on {n_runs} LLM runs" if cot
                 else f"a 2PL (cBMM) on the correctness of {n_runs} LLM runs")
    return Recipe(f"{name}_{'lart' if cot else '2pl'}", benchmark, "saem" if cot else "cbmm", "lart", files, name,
                  {**LART_SOURCE, "paths": [f"data/{f}" for f in files]}, "MIT",
                  f"{name}/<k>: k = the item's column header (0..{n_items - 1}) in data/{files[0]} of the source "
                  "repository",
                  replay_lengths, f"{benchmark} calibrated by {fitted_by}")


RECIPES = {
    r.bank_id: r
    for r in (
        lart_paper_recipe("MATH500", 500, 158, (10, 25, 50), cot=True),
        lart_paper_recipe("MATH500", 500, 158, (10, 25, 50), cot=False),
        lart_paper_recipe("AMC23", 40, 156, (5, 10, 20), cot=True),
        Recipe("chembench_2pl", "ChemBench", "cbmm", "chembench", ("responses_models_x_items.csv.gz",), "chembench",
               {**CHEMBENCH_SOURCE, "paths": ["results/binary_matrix.csv", "data/difficulty_dict.json"]}, "MIT",
               "chembench/<k>: k = the item's row index (0..2853) in results/binary_matrix.csv of the source "
               "repository; item metadata 'difficulty' from data/difficulty_dict.json",
               (10, 25, 50),
               "ChemBench calibrated by a 2PL (cBMM) on the correctness of 22 LLMs, with human difficulty labels"),
    )
}


# ----------------------------------------------------------------------------- data
def load_data(recipe: Recipe, data_root: Path = DEFAULT_DATA):
    """The recipe's ResponseData with namespaced item ids (and, for ChemBench, difficulty labels)."""
    from calibration.data import ResponseData
    from calibration.folds import with_llm_groups

    folder = Path(data_root) / recipe.folder
    if not folder.is_dir():
        raise FileNotFoundError(f"data folder {folder} not found (pass --data, the folder holding lart/ and chembench/)")
    paths = [source_file(folder, name) for name in recipe.files]
    raw = ResponseData.from_wide_csv(*paths)
    positions = [str(k) for k in range(raw.n_items)]
    if list(raw.item_ids) != positions:
        first = next(k for k, (a, b) in enumerate(zip(raw.item_ids, positions)) if a != b)
        raise ValueError(f"{paths[0]}: item header should be 0..{raw.n_items - 1} in order; column {first + 1} is "
                         f"{raw.item_ids[first]!r}")
    metadata = {"benchmark": [recipe.benchmark] * raw.n_items}
    if recipe.bank_id.startswith("chembench"):
        metadata["difficulty"] = chembench_difficulty(folder / "difficulty_dict.json", raw.n_items)
    cot = raw.cot_length if recipe.method == "saem" else None
    data = ResponseData.from_arrays(raw.correct, cot, subject_ids=raw.subject_ids,
                                    item_ids=[f"{recipe.prefix}/{k}" for k in positions], item_metadata=metadata)
    # runs of one LLM (the LaRT data: a zero-shot and a one-shot run of each) named in the stored data, so that
    # the checks and any recalibration hold them out together
    return with_llm_groups(data)[0]


def source_file(folder: Path, name: str) -> Path:
    """The source file ``name`` in ``folder``: as named, or gzip-compressed (``<name>.gz``, as in ``data/``)."""
    path = Path(folder) / name
    if path.is_file() or name.endswith(".gz"):
        return path
    compressed = path.with_name(name + ".gz")
    return compressed if compressed.is_file() else path


def chembench_difficulty(path: Path, n_items: int) -> list[str]:
    """Per-item label easy / intermediate / hard from ChemBench's difficulty_dict.json ('unlabelled' if none)."""
    groups = json.loads(Path(path).read_text(encoding="utf-8"))
    labels = ["unlabelled"] * n_items
    for label, indices in groups.items():
        for k in indices:
            if not 0 <= int(k) < n_items:
                raise ValueError(f"{path}: {label!r} lists item {k}, outside 0..{n_items - 1}")
            if labels[int(k)] != "unlabelled":
                raise ValueError(f"{path}: item {k} is labelled both {labels[int(k)]!r} and {label!r}")
            labels[int(k)] = str(label)
    return labels


def license_text(recipe: Recipe, data_root: Path = DEFAULT_DATA) -> str:
    return (Path(data_root) / recipe.folder / "LICENSE").read_text(encoding="utf-8").strip()


# ----------------------------------------------------------------------------- calibration
def calibrator(recipe: Recipe):
    """The method's calibrator with the library's defaults (only the seed and the progress bar set)."""
    if recipe.method == "saem":
        from calibration.methods.lart import LaRTSAEMCalibrator

        return LaRTSAEMCalibrator(rng=SEED, progress=False)
    from calibration.methods.cbmm import CBMMCalibrator

    return CBMMCalibrator(rng=SEED, progress=False)


def fit_bank(recipe: Recipe, data, interval_check="auto"):
    """The calibrated bank (parameters and provenance, no card yet) with its calibration responses.
    ``interval_check=False`` skips the cross-fitted check (a parameter comparison does not need it)."""
    bank = calibrator(recipe).fit(data).to_item_bank(recipe.bank_id, interval_check=interval_check)
    return bank.with_group("responses", data.to_dataset())


def replay_summary(recipe: Recipe, data, *, workers: int = 2) -> dict:
    """Cross-fitted replay audit of the adaptive 95% intervals on the real LLMs (compact, JSON-able)."""
    from calibration.audit.replay import replay_audit

    selector = "lart-theta" if recipe.method == "saem" else "mfi"
    scoring = "lart" if recipe.method == "saem" else "irt"
    ds = replay_audit(data, method=recipe.method, folds=REPLAY_FOLDS, test_lengths=recipe.replay_lengths,
                      selector=(selector, "random"), scoring=scoring, rng=SEED, n_workers=workers, progress=False)
    if int(ds["failed"].sum()):
        errors = [str(e) for e in ds["error"].values if str(e)]
        raise RuntimeError(f"replay audit of {recipe.bank_id} failed: {errors[:1]}")
    weights = ds["n_llms"].values.astype(float)  # per-fold means, weighted by the fold's LLMs

    def mean(name, sel):
        v = ds[name].sel(selector=sel, scoring=scoring).values  # (fold, test_length)
        return [round(float(x), 3) for x in np.average(v, axis=0, weights=weights)]

    return {
        "what": "share of held-out real LLMs whose full-benchmark theta lies inside the adaptive 95% interval "
                "after L items (coverage), what the model promises (promised), and RMS(theta_L - theta_full) / "
                "RMS of the model's SD of that difference (sd_ratio; 1 = honest, 2 = intervals twice too narrow)",
        "method": f"calibration.audit.replay_audit: {REPLAY_FOLDS} folds over LLMs, each fold replayed against a "
                  f"bank fitted on the others ({recipe.method}, library defaults), MAP scoring '{scoring}', sd_scale 1",
        "seed": SEED,
        "n_llms": int(weights.sum()),
        "test_length": [int(v) for v in ds["test_length"].values],
        "selectors": {sel: {"coverage": mean("coverage", sel), "promised": mean("nominal_coverage", sel),
                            "sd_ratio": mean("sd_ratio", sel)}
                      for sel in (selector, "random")},
    }


def bank_card(recipe: Recipe, data, data_root: Path, replay: dict | None) -> dict:
    """Root attributes added to the calibrated bank (netCDF attrs: str / int only; dicts as JSON)."""
    card = {
        "benchmark": recipe.benchmark,
        "description": recipe.description,
        "source": json.dumps(recipe.source, sort_keys=True),
        "license": recipe.license,
        "license_text": license_text(recipe, data_root),
        "calibration_date": CALIBRATION_DATE,
        "item_id_scheme": recipe.item_id_scheme,
        "build_script": "scripts/build_real_banks.py",
        "n_subjects": int(data.n_subjects),
    }
    if replay is not None:
        card["replay_audit"] = json.dumps(replay, sort_keys=True)
    return card


def build_bank(bank_id: str, data_root: Path = DEFAULT_DATA, *, replay: bool = True, workers: int = 2):
    """Fit one shipped bank from the data and attach its card; returns (bank, seconds by stage)."""
    recipe = RECIPES[bank_id]
    timings = {}
    t0 = time.perf_counter()
    data = load_data(recipe, data_root)
    bank = fit_bank(recipe, data, interval_check="auto" if replay else False)
    timings["fit_s"] = time.perf_counter() - t0
    summary = None
    if replay and "interval_calibration" not in bank.attrs:  # the default fit may store its own cross-fit
        t1 = time.perf_counter()
        summary = replay_summary(recipe, data, workers=workers)
        timings["replay_s"] = time.perf_counter() - t1
    return bank.replace_attrs(**bank_card(recipe, data, data_root, summary)), timings


def shipped_directory(bank_id: str) -> Path:
    return ROOT / "item_banks" / bank_id


def compare(stored, rebuilt) -> list[str]:
    """Differences between a stored bank and a rebuild: item ids, metadata, parameters (to tolerance), card."""
    problems = []
    if stored.item_ids != rebuilt.item_ids:
        problems.append("item ids differ")
        return problems
    method = stored.attrs["calibration_method"]
    atol = PARAMETER_ATOL[method]
    si, ri = stored.items, rebuilt.items
    for name in sorted(set(si.data_vars) | set(ri.data_vars)):
        if name not in si or name not in ri:
            problems.append(f"/items/{name} only in one of them")
            continue
        x, y = si[name].values, ri[name].values
        if x.dtype.kind in "fiu" and y.dtype.kind in "fiu":
            if x.shape != y.shape or not np.allclose(x, y, rtol=0, atol=atol, equal_nan=True):
                dev = np.nanmax(np.abs(x - y)) if x.shape == y.shape else "shape"
                problems.append(f"/items/{name} differs by up to {dev} (tolerance {atol})")
        elif not np.array_equal(x.astype(str), y.astype(str)):
            problems.append(f"/items/{name} differs")
    if stored.attrs["responses_sha256"] != rebuilt.attrs["responses_sha256"]:
        problems.append("calibration responses differ (responses_sha256)")
    for key in ("benchmark", "source", "license", "license_text", "n_subjects", "calibration_date", "item_id_scheme"):
        if stored.attrs.get(key) != rebuilt.attrs.get(key):
            problems.append(f"card attribute {key!r} differs: {stored.attrs.get(key)!r} vs {rebuilt.attrs.get(key)!r}")
    return problems


def main(argv=None) -> int:
    from catengine import open_item_bank, write_item_bank

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("banks", nargs="*", default=[], metavar="BANK_ID",
                        help=f"banks to build (default all: {', '.join(RECIPES)})")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="data root holding lart/ and chembench/")
    parser.add_argument("--out", type=Path, default=ROOT / "item_banks", help="parent directory of the bank directories")
    parser.add_argument("--check", action="store_true",
                        help="refit (without the replay audit) and compare with the latest stored version")
    parser.add_argument("--workers", type=int, default=2, help="processes of the replay audit (default 2)")
    args = parser.parse_args(argv)
    unknown = [b for b in args.banks if b not in RECIPES]
    if unknown:
        parser.error(f"unknown bank id {unknown[0]!r}; choose from {', '.join(RECIPES)}")
    status = 0
    for bank_id in args.banks or list(RECIPES):
        t0 = time.perf_counter()
        bank, timings = build_bank(bank_id, args.data, replay=not args.check, workers=args.workers)
        took = ", ".join(f"{k} {v:.1f}" for k, v in timings.items())
        if args.check:
            stored = open_item_bank(args.out / bank_id)
            problems = compare(stored, bank)
            print(f"{stored.source}: " + ("matches a fresh fit" if not problems else "; ".join(problems)) + f" ({took})")
            status |= bool(problems)
            continue
        directory = args.out / bank_id
        path = write_item_bank(bank, directory)
        (directory / "LICENSE").write_text(bank.attrs["license_text"] + "\n", encoding="utf-8")
        print(f"{path} ({bank.n_items} items, {bank.attrs['n_subjects']} LLMs; {took}; total {time.perf_counter() - t0:.1f} s)")
    return status


if __name__ == "__main__":
    sys.exit(main())
