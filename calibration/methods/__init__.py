"""Calibration methods, one sub-package each: ``cbmm`` (2PL), ``lart`` (LaRT by SAEM), ``psn`` (neural 4PL).

A method's folder holds its calibrator, its numba kernels and its samplers. A new method goes in a
new folder here.
"""
