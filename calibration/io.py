"""Read a response file of any format: re-exported from :mod:`catengine.responses.io`."""

from catengine.responses.io import LONG_SUFFIXES, load_responses  # noqa: F401
