"""cBMM: 2PL calibration by constrained block majorization-minimization (seed 001)."""

from calibration.methods.cbmm.calibrator import CBMMCalibrator

__all__ = ["CBMMCalibrator"]
