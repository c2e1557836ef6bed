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
17 of the realigned matrix ``data/chembench/binary_matrix_items_x_models.csv.gz``, whose rows follow
irt-on-bench's difficulty labels; ``data/chembench/SOURCE.md``). ChemBench items carry their human
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
calibration runs (``calibration.heldout.with_llm_groups`` finds the run suffixes; the stored responses
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
    content: str = ""  # which item content the bank carries: "math500", "amc23", "chembench" (see content_for)


LART_SOURCE = {
    "dataset": "LaRT paper data (vLLM, temperature 0.5, top-p 0.95, max 10,240 output tokens; zero- and one-shot prompts)",
    "paper": "Xu, Liu, Wang, Gu, 'Latency-Response Theory Model: Evaluating Large Language Models via Response "
             "Accuracy and Chain-of-Thought Length', arXiv:2512.07019",
    "repository": "https://github.com/Toby-X/Latency-Response-Theory-Model",
    "commit": "8e5d71bae876c00cef7ec765097dfdbc4803e4af",
}
CHEMBENCH_SOURCE = {
    "dataset": "ChemBench item-level correctness ('all_correct' metric) of 22 LLMs, via irt-on-bench, realigned "
               "with the LLMs' published per-question results (data/chembench/SOURCE.md); questions from "
               "lamalab-org/chembench-paper @ 344e10e5de2d764dbfb031cdba064e7f19b7b513",
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
                  replay_lengths, f"{benchmark} calibrated by {fitted_by}", content=name)


RECIPES = {
    r.bank_id: r
    for r in (
        lart_paper_recipe("MATH500", 500, 158, (10, 25, 50), cot=True),
        lart_paper_recipe("MATH500", 500, 158, (10, 25, 50), cot=False),
        lart_paper_recipe("AMC23", 40, 156, (5, 10, 20), cot=True),
        Recipe("chembench_2pl", "ChemBench", "cbmm", "chembench", ("responses_models_x_items.csv.gz",), "chembench",
               {**CHEMBENCH_SOURCE, "paths": ["results/binary_matrix.csv", "data/difficulty_dict.json"]}, "MIT",
               "chembench/<k>: k = the item's row (0..2853) of the realigned matrix "
               "data/chembench/binary_matrix_items_x_models.csv.gz of this repository (irt-on-bench's "
               "results/binary_matrix.csv with two row blocks of 13 LLMs put back in place; rows in the order of "
               "data/difficulty_dict.json); item metadata 'difficulty' from data/difficulty_dict.json",
               (10, 25, 50),
               "ChemBench calibrated by a 2PL (cBMM) on the correctness of 22 LLMs, with human difficulty labels",
               content="chembench"),
    )
}


# ----------------------------------------------------------------------------- data
def load_data(recipe: Recipe, data_root: Path = DEFAULT_DATA):
    """The recipe's ResponseData with namespaced item ids (and, for ChemBench, difficulty labels)."""
    from calibration.data import ResponseData
    from calibration.heldout import with_llm_groups

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


# ----------------------------------------------------------------------------- item content
#: how the LaRT paper's LLMs were run (data/lart/SOURCE.md); its exact prompts are not published
LART_RUNS = {
    "engine": "vLLM", "temperature": 0.5, "top_p": 0.95, "max_output_tokens": 10240,
    "prompts": "zero-shot and one-shot (two runs per LLM); the exact prompt texts are not published",
    "cot_length": "completion tokens of the reply (reasoning included); a reply stopped at 10,240 tokens is censored",
}
MATH_PROMPT = ("{question}\n\nReason step by step, and put your final answer within \\boxed{}.")
MATH_EXTRACTION = ("the last \\boxed{...} of the reply, else a final-answer line ('Final answer: ...', "
                   "'The answer is ...'); no answer found is graded wrong")
#: MATH500 items that no calibration run solved and whose reference answers have formats a plain
#: string or number comparison misses (data/math500/SOURCE.md): the calibration data most likely
#: marks correct answers to them wrong
MATH500_FRAGILE = (96, 99, 154, 176, 217, 242, 257, 284, 383, 408, 422)
CHEMBENCH_MCQ_PROMPT = (
    "The following is a multiple-choice question about chemistry. Choose the correct answer.\n\n"
    "Question: {question}\n\nOptions:\n{options}\n\n"
    "Give the letter(s) of the correct answer between [ANSWER] and [/ANSWER], separated by commas if more "
    "than one option is correct, for example [ANSWER]A[/ANSWER] or [ANSWER]A, C[/ANSWER]. "
    "Put nothing else between the tags.")
CHEMBENCH_NUMBER_PROMPT = (
    "The following is a question about chemistry.\n\nQuestion: {question}\n\n"
    "Give your final answer as one number, with a dot as the decimal separator, between [ANSWER] and "
    "[/ANSWER], for example [ANSWER]0.25[/ANSWER]. Put nothing else between the tags.")
#: ChemBench's prompter removes these wrappers around chemistry markup before asking (keeping the content)
#: ChemBench's topic keywords (a question's first one is its topic; 878 questions have none)
CHEMBENCH_TOPICS = ("analytical-chemistry", "chemical-preference", "general-chemistry", "inorganic-chemistry",
                    "materials-science", "organic-chemistry", "physical-chemistry", "technical-chemistry", "toxicity")
_CHEMBENCH_BRACED = ("\\ce{", "\\pu{")
_CHEMBENCH_TAGS = (("[START_SMILES]", "[END_SMILES]"), ("[START_RXNSMILES]", "[END_RXNSMILES]"))


def content_for(recipe: Recipe, data_root: Path = DEFAULT_DATA, n_items: int | None = None):
    """The item content of a shipped bank (one ItemContent per item, in bank order) and its protocol."""
    builders = {"math500": math500_content, "amc23": amc23_content, "chembench": chembench_content}
    return builders[recipe.content](Path(data_root), recipe.prefix)


def math500_content(data_root: Path, prefix: str):
    """MATH-500 (data/math500/test.jsonl.gz): line j is item j of the LaRT data."""
    import gzip

    from catengine.itembank.content import ItemContent

    with gzip.open(data_root / "math500" / "test.jsonl.gz", "rt", encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh]
    note = ("no calibration run was graded correct on this item, whose reference answer has a format that a plain "
            "string or number comparison misses: the calibration data most likely marks correct answers wrong, so its "
            "parameters describe that grading, not the item")
    contents = [ItemContent(item=f"{prefix}/{k}", question=row["problem"], answer=row["answer"], answer_type="math",
                            grading_note=note if k in MATH500_FRAGILE else "",
                            metadata={"subject": row["subject"], "level": str(row["level"]),
                                      "unique_id": row["unique_id"]})
                for k, row in enumerate(rows)]
    protocol = {
        "prompts": {"math": MATH_PROMPT},
        "answer_extraction": MATH_EXTRACTION,
        "grader": {"name": "math", "version": "1"},
        "calibration_runs": LART_RUNS,
        "source": "MATH-500 (openai/prm800k test split, MIT): problems, reference answers, subject and level",
        "flagged_items": "items with a grading_note are excluded from adaptive runs by default",
    }
    return contents, protocol


def amc23_content(data_root: Path, prefix: str):
    """AMC23 answers (data/amc23/answers.csv): the problem texts are not shipped, only their sha256."""
    import csv

    from catengine.itembank.content import ItemContent

    with open(data_root / "amc23" / "answers.csv", encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh))
    contents = [ItemContent(item=f"{prefix}/{row['item']}", question=None, answer=str(int(row["answer"])),
                            answer_type="integer", question_sha256=row["problem_sha256"],
                            metadata={"contest": row["contest"], "problem_number": row["problem_number"],
                                      "url": row["url"]})
                for row in rows]
    if [c.item for c in contents] != [f"{prefix}/{k}" for k in range(len(contents))]:
        raise ValueError(f"{data_root / 'amc23' / 'answers.csv'}: items must be 0..{len(contents) - 1} in order")
    protocol = {
        "prompts": {"integer": MATH_PROMPT},
        "answer_extraction": MATH_EXTRACTION + "; the answer is an integer",
        "grader": {"name": "integer", "version": "1"},
        "calibration_runs": LART_RUNS,
        "source": "2023 AMC 12A/12B problems as reworded in the Qwen2.5-Math evaluation set; the texts carry no "
                  "licence and are not shipped: attach a copy (--content FILE), verified by each problem's sha256",
    }
    return contents, protocol


def _strip_chembench_markup(text: str) -> str:
    """``text`` with ``\\ce{...}`` and ``\\pu{...}`` (balanced braces), ``$...$`` and the SMILES tags replaced
    by their content, as ChemBench's prompter does before asking."""
    import re

    for opening in _CHEMBENCH_BRACED:
        while (start := text.find(opening)) >= 0:
            depth, k = 1, start + len(opening)
            while k < len(text) and depth:
                depth += {"{": 1, "}": -1}.get(text[k], 0)
                k += 1
            if depth:  # unbalanced: leave the rest as it is
                break
            text = text[:start] + text[start + len(opening):k - 1] + text[k:]
    for opening, closing in _CHEMBENCH_TAGS:
        text = text.replace(opening, "").replace(closing, "")
    return re.sub(r"\$(.*?)\$", r"\1", text, flags=re.S)


def chembench_content(data_root: Path, prefix: str):
    """ChemBench (data/chembench/questions.jsonl.gz): row k's question, in the realigned row order."""
    import gzip

    from catengine.itembank.content import OPTION_LETTERS, ItemContent

    with gzip.open(data_root / "chembench" / "questions.jsonl.gz", "rt", encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh]
    canaries = {row["question"].get("canary") for row in rows}
    difficulty = chembench_difficulty(data_root / "chembench" / "difficulty_dict.json", len(rows))
    contents = []
    for k, row in enumerate(rows):
        if row["item"] != str(k):
            raise ValueError(f"questions.jsonl.gz line {k + 1}: item {row['item']!r}, expected '{k}'")
        example = row["question"]["examples"][0]
        question = _strip_chembench_markup(example["input"])
        keywords = row["question"].get("keywords", [])
        meta = {"name": row["name"], "uuid": row["uuid"], "path": row["path"], "source_folder": row["path"].split("/")[0],
                "topic": next((k for k in keywords if k in CHEMBENCH_TOPICS), ""), "difficulty": difficulty[k],
                "keywords": ", ".join(keywords),
                "exchangeable_group": "" if row["exchangeable_group"] is None else str(row["exchangeable_group"])}
        if "target_scores" in example:
            options = [_strip_chembench_markup(text) for text in example["target_scores"]]
            correct = [OPTION_LETTERS[i] for i, score in enumerate(example["target_scores"].values()) if float(score) == 1.0]
            contents.append(ItemContent(item=f"{prefix}/{k}", question=question, answer=", ".join(correct),
                                        answer_type="multiple_choice", options=options, correct_options=correct,
                                        metadata=meta))
        else:
            target = float(example["target"])
            note = ("ChemBench's rule (correct iff the absolute error is below 1% of the target) never accepts a "
                    "target <= 0: every calibration LLM is marked wrong whatever it answered") if target <= 0 else ""
            contents.append(ItemContent(item=f"{prefix}/{k}", question=question, answer=str(example["target"]),
                                        answer_type="number", tolerance=0.01, grading_note=note, metadata=meta))
    protocol = {
        "prompts": {"multiple_choice": CHEMBENCH_MCQ_PROMPT, "number": CHEMBENCH_NUMBER_PROMPT},
        "answer_extraction": "the text between [ANSWER] and [/ANSWER] (also [ANS], <ANS>, <ANSWER>); for a "
                             "multiple-choice item the option letters in it, for a numeric item the number in it "
                             "(scientific notation accepted)",
        "grader": {"name": "chembench", "version": "1"},
        "calibration_runs": {
            "engine": "ChemBench's own runner (chem-bench @ 344e10e5), one run per LLM, instruction templates",
            "scoring": "multiple choice: correct iff exactly the set of options scored 1; numeric: correct iff "
                       "|answer - target| < 0.01 * target",
            "markup": "\\ce{}, \\pu{}, $...$ and SMILES tags replaced by their content before asking",
            "options": "in the order of the question file (not permuted)",
        },
        "canary": sorted(c for c in canaries if c)[0] if any(canaries) else "",
        "source": "ChemBench questions (lamalab-org/chembench-paper @ 344e10e5, MIT), realigned with the matrix rows; "
                  "rows in an exchangeable group (identical answers of all 22 LLMs) hold one valid assignment",
        "flagged_items": "items with a grading_note are excluded from adaptive runs by default",
    }
    return contents, protocol


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
    ``interval_check=False`` skips the held-out check (a parameter comparison does not need it)."""
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
    bank = bank.replace_attrs(**bank_card(recipe, data, data_root, summary))
    if recipe.content:
        bank = bank.with_content(*content_for(recipe, data_root))
    return bank, timings


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
    if stored.contents() != rebuilt.contents() or stored.protocol != rebuilt.protocol:
        problems.append("item content or protocol differs")
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
