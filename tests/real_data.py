"""Where the real LLM data lives: the one definition for the tests and the benchmarks
(``benchmarks/_paths.py`` loads this module).

* :data:`DATA` is the repository's ``data/``: the public sets whose licenses allow shipping them
  (``lart/`` MATH500 and AMC23, ``chembench/``, ``lrm_token_economy/``, and
  ``reference/cbmm_math500/``, reference fits of the LaRT MATH500 matrix), gzip-compressed, each
  with its LICENSE and SOURCE.md. It is part of every checkout, so nothing that reads it skips.
* :data:`PSN_DATA` is ``../shared/data`` beside the repository, for the PSN-IRT matrix
  (``psn_irt/``) and the reference values derived from it (``reference/psn_irt/``). That data
  states no license and is not shipped: a test that reads it is skipped with
  :func:`psn_missing`'s reason, which names the missing folder, and a benchmark stops with it.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data"
LART = DATA / "lart"
CHEMBENCH = DATA / "chembench"
LRM_TOKEN_ECONOMY = DATA / "lrm_token_economy"
REFERENCE = DATA / "reference"
MATH500 = DATA / "math500"
AMC23 = DATA / "amc23"

PSN_DATA = ROOT.parent / "shared" / "data"
PSN_IRT = PSN_DATA / "psn_irt"
#: the AMC23 problem texts state no licence: never in the repository, read from beside it when present
AMC23_PROBLEMS = PSN_DATA / "amc23" / "test.jsonl"


def amc23_problems_missing() -> str | None:
    """Why the AMC23 problem texts cannot be read (None when they are there)."""
    if AMC23_PROBLEMS.is_file():
        return None
    return (f"{AMC23_PROBLEMS} is absent: the AMC23 problem texts state no licence, so they are not shipped; "
            f"place a copy there (beside the repository) to run this")


def lart_files(benchmark: str) -> tuple[Path, Path]:
    """The accuracy and CoT-length matrices of one LaRT benchmark (``"math500"`` or ``"amc23"``)."""
    return LART / f"accuracy_{benchmark}.csv.gz", LART / f"cot_length_{benchmark}.csv.gz"


def psn_missing(path: Path = PSN_IRT) -> str | None:
    """Why PSN-IRT data at ``path`` cannot be read (None when it is there)."""
    if Path(path).exists():
        return None
    return (f"{path} is absent: the PSN-IRT data states no license, so it is not shipped; "
            f"place it in {PSN_DATA} (beside the repository) to run this")


__all__ = ["AMC23", "AMC23_PROBLEMS", "CHEMBENCH", "DATA", "LART", "MATH500", "amc23_problems_missing", "LRM_TOKEN_ECONOMY", "PSN_DATA", "PSN_IRT", "REFERENCE", "ROOT", "lart_files",
           "psn_missing"]
