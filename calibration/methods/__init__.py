"""Calibration methods, one sub-package each, and the one registry of them.

* ``cbmm/`` -- 2PL by constrained block majorization-minimization (:class:`CBMMCalibrator`)
* ``lart/`` -- LaRT (accuracy + chain-of-thought length) by SAEM (:class:`LaRTSAEMCalibrator`)
* ``psn/`` -- PSN-IRT neural 4PL with a last-layer Laplace posterior (:class:`PSNCalibrator`)

A method's folder holds its calibrator (a :class:`calibration.base.BaseCalibrator`), its numba
kernels and its samplers. :data:`METHODS` is the registry that the command line
(``calibration fit <name>``), recalibration, the audits and the bank schema use: a new method is a
new folder here plus one :class:`CalibrationMethod` entry below (and its name in
``catengine.itembank.schema.CALIBRATION_METHODS``, which a test keeps in step). Entries name their
calibrator by module and class, so importing this registry loads no numerical code.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module


@dataclass(frozen=True)
class CalibrationMethod:
    """One calibration method.

    ``name`` is the command-line subcommand, the audits' method name and the bank's
    ``calibration_method``; ``aliases`` are other accepted spellings (older banks, ``--method``).
    ``response_model`` is the kind of bank it writes; ``needs_cot`` whether it needs CoT lengths;
    ``cli_seed`` the seed ``calibration fit`` uses when ``--seed`` is not given; ``title`` heads
    its option group in ``--help``; ``summary`` is its one-line description.
    """

    name: str
    module: str
    class_name: str
    response_model: str
    summary: str
    title: str
    aliases: tuple[str, ...] = ()
    needs_cot: bool = False
    cli_seed: int | None = None

    @property
    def calibrator(self) -> type:
        """The calibrator class (imported on first use)."""
        return getattr(import_module(self.module), self.class_name)

    @property
    def names(self) -> tuple[str, ...]:
        return (self.name, *self.aliases)


METHODS: dict[str, CalibrationMethod] = {
    m.name: m
    for m in (
        CalibrationMethod(
            "cbmm", "calibration.methods.cbmm.calibrator", "CBMMCalibrator", "2pl",
            "2PL by constrained block majorization-minimization (fast, joint ML)", "cBMM options",
        ),
        CalibrationMethod(
            "saem", "calibration.methods.lart.calibrator", "LaRTSAEMCalibrator", "lart",
            "LaRT (accuracy + CoT length) by SAEM with exact posterior draws", "SAEM (LaRT) options",
            needs_cot=True, cli_seed=0,
        ),
        CalibrationMethod(
            "psn", "calibration.methods.psn.calibrator", "PSNCalibrator", "4pl",
            "PSN-IRT neural 4PL with a last-layer Laplace posterior", "PSN-IRT options",
            aliases=("psn-laplace",), cli_seed=3407,  # the reference train.py's seed
        ),
    )
}


def get_method(name: str) -> CalibrationMethod:
    """The registered method called ``name`` (or one of its aliases)."""
    key = str(name).strip().lower()
    for method in METHODS.values():
        if key in method.names:
            return method
    raise ValueError(f"unknown calibration method {name!r}; allowed: {', '.join(all_method_names())}")


def all_method_names() -> tuple[str, ...]:
    """Every accepted spelling: the registered names and their aliases."""
    return tuple(n for m in METHODS.values() for n in m.names)


__all__ = ["METHODS", "CalibrationMethod", "all_method_names", "get_method"]
