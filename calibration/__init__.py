"""Offline calibration of item banks from LLM response matrices."""

from calibration.base import BaseCalibrator, ConvergenceWarning, NotFittedError
from calibration.data import ResponseData
from calibration.simulate import (
    SimulationTruth,
    draw_abilities,
    draw_item_params,
    simulate_dataset,
    simulate_responses,
)

__all__ = [
    "BaseCalibrator",
    "ConvergenceWarning",
    "NotFittedError",
    "ResponseData",
    "SimulationTruth",
    "draw_abilities",
    "draw_item_params",
    "simulate_dataset",
    "simulate_responses",
]
