"""Readers of harness logs (lm-evaluation-harness, Inspect AI): re-exported from
:mod:`catengine.responses.readers`, shared with ``catengine``'s adapters (the online engine never
imports calibration)."""

from catengine.responses.readers import *  # noqa: F401,F403
from catengine.responses.readers import (  # noqa: F401
    CotLengthApproximationWarning,
    FileReport,
    ReadReport,
    read_inspect_logs,
    read_lm_eval_samples,
)
