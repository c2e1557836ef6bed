"""LaRT: joint accuracy + chain-of-thought length calibration by SAEM (Xu et al. 2025)."""

from calibration.methods.lart.calibrator import LaRTSAEMCalibrator

__all__ = ["LaRTSAEMCalibrator"]
