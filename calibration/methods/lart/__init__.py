"""LaRT: joint accuracy + chain-of-thought length calibration by SAEM (seed 000)."""

from calibration.methods.lart.calibrator import LaRTSAEMCalibrator

__all__ = ["LaRTSAEMCalibrator"]
