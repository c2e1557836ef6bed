"""Online adaptive evaluation of LLMs against calibrated item banks.

Heavy layers (xarray for banks, the session machinery) load lazily on first use, so that the
numerics (``catengine.models``, ``estimation``, ``selection``, ``stopping``) import without them.
"""

from catengine.errors import BankExhaustedError, CatEngineError, ItemBankSchemaError, ItemBankVersionExistsError
from catengine.lazy import lazy_attributes

__version__ = "0.1.0"

_LAZY = {
    "ItemBank": "catengine.itembank",
    "open_item_bank": "catengine.itembank",
    "write_item_bank": "catengine.itembank",
    "upgrade_item_bank": "catengine.itembank",
    "ItemContent": "catengine.itembank.content",
    "list_banks": "catengine.itembank",
    "bank_card": "catengine.itembank",
    "ItemParams": "catengine.models.params",
    "ItemUncertainty": "catengine.models.params",
    "CATSession": "catengine.session",
    "PairedSession": "catengine.paired",
    "Engine": "catengine.session",
    "replay": "catengine.pattern_replay",
    "ReplayResult": "catengine.pattern_replay",
    "UnknownItemsError": "catengine.pattern_replay",
    "ResponseData": "catengine.responses",
    "load_responses": "catengine.responses",
    "load_subject_answers": "catengine.responses",
    "default_selector_for": "catengine.selection",
    "DoublyRobustSelection": "catengine.selection",
    "default_stopping": "catengine.stopping",
    "UnknownItemError": "catengine.session.errors",
    "UnknownSubjectError": "catengine.session.errors",
    "ItemAlreadyAnsweredError": "catengine.session.errors",
    "InvalidResponseError": "catengine.session.errors",
    "CoTOutOfRangeError": "catengine.session.errors",
    "SessionLogError": "catengine.session.errors",
    "SessionLogLockedError": "catengine.session.errors",
    "LogConfigMismatchError": "catengine.session.errors",
    "ResponseFileError": "catengine.errors",
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
    "RandomisedSelection": "catengine.selection",
    "ScoreEstimate": "catengine.scoring",
    "DesignNotRandomisedError": "catengine.scoring",
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
    "ScoreIntervalBelow": "catengine.stopping",
    "AnyOf": "catengine.stopping",
    "AllOf": "catengine.stopping",
}

__all__ = ["BankExhaustedError", "CatEngineError", "ItemBankSchemaError", "ItemBankVersionExistsError", *_LAZY]


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, __all__)
