"""Putting a bank's questions to an LLM: :func:`run_model` (ask, grade, record, stop on the score)."""

from catengine.runner.run import RunConfigurationError, RunProgress, RunResult, full_run_cost, run_model

__all__ = ["RunConfigurationError", "RunProgress", "RunResult", "full_run_cost", "run_model"]
