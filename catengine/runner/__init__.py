"""Putting a bank's questions to an LLM: :func:`run_model` (ask, grade, record, stop on the score), and
to two LLMs at once: :func:`run_pair` (a paired comparison, stop once one is known to be better)."""

from catengine.runner.paired_run import PairedProgress, PairedRunResult, run_pair
from catengine.runner.run import RunConfigurationError, RunProgress, RunResult, full_run_cost, run_model

__all__ = ["PairedProgress", "PairedRunResult", "RunConfigurationError", "RunProgress", "RunResult", "full_run_cost",
           "run_model", "run_pair"]
