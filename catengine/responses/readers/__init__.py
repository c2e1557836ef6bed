"""Readers for the evaluation logs people already have, into :class:`~catengine.responses.data.ResponseData`.

* :func:`read_lm_eval_samples`: lm-evaluation-harness ``--log_samples`` output
  (``samples_<task>_<timestamp>.jsonl``), one subject per model run.
* :func:`read_inspect_logs`: Inspect AI eval logs (``.json``; ``.eval`` zip archives too), one
  subject per evaluated model.
* The plain long table (subject, item, correct, cot_tokens) is ``ResponseData.from_long``.

Common behaviour
----------------
* Item ids are ``"<task>/<sample id>"`` by default (a format template can be passed); item
  metadata ``benchmark`` holds the task name.
* CoT length (tokens) comes from a token count recorded in the log when there is one; otherwise
  from ``tokenizer(text)`` on the generated text (a callable returning an int or a sequence of
  tokens); with no tokenizer, from a whitespace word count, which is only an APPROXIMATION of a
  token count: a :class:`CotLengthApproximationWarning` is emitted and the report says so.
  Samples with no generated text (e.g. log-likelihood tasks) get a missing (NaN) length; when no
  cell has a length, ``cot_length`` is None.
* ``return_report=True`` returns ``(data, ReadReport)``: per file, the rows read and used, the
  metric / scorer, and the CoT source (``"recorded:<field>"``, ``"tokenizer:<name>"``,
  ``"whitespace-approximation"`` or ``"none"``; several joined by ``"+"``).
* Bad input raises ValueError naming the file and the line (JSONL) or the sample (JSON):
  unparsable / truncated JSON (with line and column), duplicated samples with different values,
  non-binary or mixed metrics, several epochs, partial credit without a threshold, and, with
  ``expected_items=`` (ids or a bank), log items that are not in the bank, and subject or item ids
  longer than ``MAX_ID_LENGTH`` (1,000) characters. Readers write nothing.
"""

from catengine.responses.readers._common import (
    MAX_ID_LENGTH,
    CotLengthApproximationWarning,
    FileReport,
    ReadReport,
    id_length_problem,
)
from catengine.responses.readers.inspect_ai import read_inspect_logs
from catengine.responses.readers.lm_eval_harness import read_lm_eval_samples

__all__ = ["MAX_ID_LENGTH", "CotLengthApproximationWarning", "FileReport", "ReadReport", "id_length_problem",
           "read_inspect_logs", "read_lm_eval_samples"]
