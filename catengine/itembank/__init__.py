"""Versioned, immutable item banks (schema v1, netCDF4 groups)."""

from catengine.itembank.bank import ItemBank
from catengine.itembank.io import list_versions, open_item_bank, upgrade_item_bank, write_item_bank
from catengine.itembank.shipped import bank_card, list_banks

__all__ = ["ItemBank", "bank_card", "list_banks", "list_versions", "open_item_bank", "upgrade_item_bank", "write_item_bank"]
