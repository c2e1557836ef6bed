"""Response data: re-exported from :mod:`catengine.responses.data`, the reader core shared by
``calibration fit`` and ``catengine evaluate`` (the online engine never imports calibration)."""

from catengine.responses.data import *  # noqa: F401,F403
from catengine.responses.data import (  # noqa: F401 - names used across calibration
    LONG_COLUMNS,
    MISSING,
    MISSING_TOKENS,
    ResponseData,
    format_suffix,
    jsonl_objects,
    open_text,
)
