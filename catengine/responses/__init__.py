"""Response files -> :class:`ResponseData` (subjects x items: correct 0/1, CoT lengths): the one
reader stack of every command (``calibration fit``, ``catengine evaluate``).

Every problem with an input file raises :class:`~catengine.errors.ResponseFileError` (a
ValueError) naming the file, line, column and value. Compressed files (``.gz``, ``.bz2``,
``.xz``) are read transparently. Imports numpy only (xarray lazily, for netCDF files).
"""

from catengine.responses.data import MISSING, ResponseData
from catengine.responses.io import load_responses, load_subject_answers

__all__ = ["MISSING", "ResponseData", "load_responses", "load_subject_answers"]
