"""Offline calibration of item banks from LLM response matrices.

The calibrators (numba kernels), the simulators (scipy) and the heavier tools load lazily on
first use, so ``import calibration`` loads numpy and the response data only.
"""

from calibration.base import BaseCalibrator, ConvergenceWarning, NotFittedError
from calibration.data import ResponseData
from catengine.lazy import lazy_attributes

_LAZY = {
    "SimulationTruth": "calibration.simulate",
    "draw_abilities": "calibration.simulate",
    "draw_item_params": "calibration.simulate",
    "simulate_dataset": "calibration.simulate",
    "simulate_responses": "calibration.simulate",
    "CBMMCalibrator": "calibration.methods.cbmm",
    "LaRTSAEMCalibrator": "calibration.methods.lart",
    "PSNCalibrator": "calibration.methods.psn",
    "load_responses": "calibration.io",
    "RecalibrationConfig": "calibration.recalibration",
    "recalibrate": "calibration.recalibration",
    "diff_banks": "calibration.recalibration",
    "merge_responses": "calibration.recalibration",
    "link": "calibration.linking",
    "read_lm_eval_samples": "calibration.readers",
    "read_inspect_logs": "calibration.readers",
    "check_response_data": "calibration.data_check",
    "DataCheck": "calibration.data_check",
}

_LAZY.update({
    "with_held_out_check": "calibration.heldout",
    "cross_fit_intervals": "calibration.heldout",
    "recovery_audit": "calibration.audit",
    "cat_audit": "calibration.audit",
    "replay_audit": "calibration.audit",
    "short_form_audit": "calibration.audit",
})

__all__ = ["BaseCalibrator", "ConvergenceWarning", "NotFittedError", "ResponseData", *_LAZY]


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, __all__)
