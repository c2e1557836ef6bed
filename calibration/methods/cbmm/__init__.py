"""cBMM: 2PL calibration by constrained block majorization-minimization (Qu et al. 2026)."""

from calibration.methods.cbmm.calibrator import CBMMCalibrator

__all__ = ["CBMMCalibrator"]
