"""Online adaptive evaluation of LLMs against calibrated item banks.

Heavy layers (xarray for banks, the session machinery) load lazily on first use, so that the
numerics (``catengine.models``, ``estimation``, ``selection``, ``stopping``) import without them.
"""

from importlib import import_module

from catengine.errors import BankExhaustedError, CatEngineError, ItemBankSchemaError, ItemBankVersionExistsError

__version__ = "0.1.0"

_LAZY = {
    "ItemBank": "catengine.itembank",
    "open_item_bank": "catengine.itembank",
    "write_item_bank": "catengine.itembank",
    "ItemParams": "catengine.models.params",
    "ItemUncertainty": "catengine.models.params",
    "CATSession": "catengine.session",
    "Engine": "catengine.session",
    "resume": "catengine.session",
    "TraitEstimate": "catengine.estimation",
    "TraitPrior": "catengine.estimation",
    "MAPEstimator": "catengine.estimation",
    "EAPEstimator": "catengine.estimation",
    "MaxFisherInformation": "catengine.selection",
    "PosteriorExpectedInformation": "catengine.selection",
    "PosteriorWeightedInformation": "catengine.selection",
    "KullbackLeiblerIndex": "catengine.selection",
    "RandomSelection": "catengine.selection",
    "ThetaTargetedInformation": "catengine.selection",
    "DOptimalInformation": "catengine.selection",
    "AOptimalInformation": "catengine.selection",
    "LaRTReplicationSelection": "catengine.selection",
    "Randomesque": "catengine.selection",
    "SympsonHetter": "catengine.selection",
    "ContentBalance": "catengine.selection",
    "MaxItems": "catengine.stopping",
    "MinItems": "catengine.stopping",
    "StandardErrorBelow": "catengine.stopping",
    "InformationBelow": "catengine.stopping",
    "RivalOrderDecided": "catengine.stopping",
    "AnyOf": "catengine.stopping",
    "AllOf": "catengine.stopping",
}

__all__ = ["BankExhaustedError", "CatEngineError", "ItemBankSchemaError", "ItemBankVersionExistsError", *_LAZY]


def __getattr__(name):
    if name in _LAZY:
        value = getattr(import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'catengine' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
