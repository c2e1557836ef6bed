"""Item bank files edited by hand, for the schema tests (written by xarray, not by ``write_item_bank``)."""

import pytest

from catengine import open_item_bank
from catengine.errors import ItemBankSchemaError


def schema_error(tree, edit, path) -> ItemBankSchemaError:
    """Apply ``edit`` (changes the ``xarray.DataTree`` in place) to a bank's tree, write it to ``path``
    with netCDF4 and return the ItemBankSchemaError that opening the file raises (none: the test fails)."""
    edit(tree)
    tree.to_netcdf(path, engine="netcdf4")
    with pytest.raises(ItemBankSchemaError) as info:
        open_item_bank(path)
    return info.value
