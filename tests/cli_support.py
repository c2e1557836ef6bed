"""Running the ``catengine`` command in a test on the shipped LaRT answers (``data/lart``)."""

from __future__ import annotations

from catengine.cli import main
from real_data import lart_files

#: the LLM whose recorded answers the command reads
SUBJECT = "Qwen_Qwen3_8B_zero_shot"


def evaluate_recorded(capsys, benchmark: str, *args) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of ``catengine evaluate --json`` on the recorded answers and CoT
    lengths of ``benchmark`` (``"math500"`` or ``"amc23"``, keyed by the benchmark's own ids) of
    :data:`SUBJECT`: 4 items, seed 0; ``args`` are further options (``--bank``, ``--item-prefix``)."""
    accuracy, cot = lart_files(benchmark)
    code = main(["evaluate", "--responses", str(accuracy), "--cot", str(cot), "--subject", SUBJECT,
                 "--max-items", "4", "--seed", "0", "--json", *args])
    out, err = capsys.readouterr()
    return code, out, err
