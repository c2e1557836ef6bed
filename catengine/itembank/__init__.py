"""Versioned, immutable item banks (schema v1, netCDF4 groups)."""

from catengine.itembank.bank import ItemBank
from catengine.itembank.io import list_versions, open_item_bank, write_item_bank

__all__ = ["ItemBank", "list_versions", "open_item_bank", "write_item_bank"]
