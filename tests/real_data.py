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

PSN_DATA = ROOT.parent / "shared" / "data"
PSN_IRT = PSN_DATA / "psn_irt"


def lart_files(benchmark: str) -> tuple[Path, Path]:
    """The accuracy and CoT-length matrices of one LaRT benchmark (``"math500"`` or ``"amc23"``)."""
    return LART / f"accuracy_{benchmark}.csv.gz", LART / f"cot_length_{benchmark}.csv.gz"


def psn_missing(path: Path = PSN_IRT) -> str | None:
    """Why PSN-IRT data at ``path`` cannot be read (None when it is there)."""
    if Path(path).exists():
        return None
    return (f"{path} is absent: the PSN-IRT data states no license, so it is not shipped; "
            f"place it in {PSN_DATA} (beside the repository) to run this")


__all__ = ["CHEMBENCH", "DATA", "LART", "LRM_TOKEN_ECONOMY", "PSN_DATA", "PSN_IRT", "REFERENCE", "ROOT", "lart_files",
           "psn_missing"]
