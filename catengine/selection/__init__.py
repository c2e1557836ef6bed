"""Item selection: information criteria, exposure and content control (docs/math.md §3 and §5).

Selectors (role :class:`ItemSelector`; registry ``SELECTORS`` name -> class):

======================  ======================================  ==========================
name                    class                                   banks
======================  ======================================  ==========================
``mfi``                 :class:`MaxFisherInformation`           all (LaRT: probit part)
``pei``                 :class:`PosteriorExpectedInformation`   banks with item uncertainty
``pwi``                 :class:`PosteriorWeightedInformation`   all
``kl``                  :class:`KullbackLeiblerIndex`           all
``random``              :class:`RandomSelection`                all
``randomised``          :class:`RandomisedSelection`            all (known selection probabilities)
``lart-theta``          :class:`ThetaTargetedInformation`       lart
``lart-d``              :class:`DOptimalInformation`            lart
``lart-a``              :class:`AOptimalInformation`            lart
``lart-replication``    :class:`LaRTReplicationSelection`       lart
``score-factor-d``      :class:`ScoreFactorDOptimal`            banks with score factors
``doubly-robust``       :class:`DoublyRobustSelection`          all (adaptive + known-probability draws)
======================  ======================================  ==========================

Exposure / content control (role :class:`ExposureControl`; registry ``EXPOSURE_CONTROLS``):
``randomesque`` (:class:`Randomesque`), ``sympson-hetter`` (:class:`SympsonHetter`),
``content`` (:class:`ContentBalance`).
"""

from catengine.models.response_models import response_model as resolve_response_model
from catengine.selection.base import DrawContext, ItemSelector, ItemTable, SelectionState, is_design_draw
from catengine.selection.exposure import ContentBalance, ExposureContext, ExposureControl, Randomesque, SympsonHetter
from catengine.selection.information import (
    KullbackLeiblerIndex,
    MaxFisherInformation,
    PosteriorExpectedInformation,
    PosteriorWeightedInformation,
    RandomSelection,
)
from catengine.selection.randomised import RandomisedSelection
from catengine.selection.doubly_robust import DoublyRobustSelection
from catengine.selection.score_factors import ScoreFactorDOptimal
from catengine.selection.lart import (
    AOptimalInformation,
    DOptimalInformation,
    LaRTReplicationSelection,
    ThetaTargetedInformation,
)

SELECTORS = {
    cls.name: cls
    for cls in (
        MaxFisherInformation,
        PosteriorExpectedInformation,
        PosteriorWeightedInformation,
        KullbackLeiblerIndex,
        RandomSelection,
        RandomisedSelection,
        ThetaTargetedInformation,
        DOptimalInformation,
        AOptimalInformation,
        LaRTReplicationSelection,
        ScoreFactorDOptimal,
        DoublyRobustSelection,
    )
}
EXPOSURE_CONTROLS = {cls.name: cls for cls in (Randomesque, SympsonHetter, ContentBalance)}


def default_selector(response_model, item_uncertainty: bool = False, score_factors: bool = False) -> ItemSelector:
    """D-optimal design in the score factors when the bank carries them (the full-benchmark score
    is what users ask for; docs/score_prediction.md §2); otherwise theta-targeted precision for
    LaRT banks (uses CoT information; posterior-expected probit information when the bank carries
    item uncertainty) and, for logistic banks, posterior-expected information when the bank carries
    item-parameter uncertainty (docs/math.md §7.4), point information otherwise. ``response_model``:
    the bank's response model object (``ItemParams.model``) or its name."""
    if score_factors:
        return ScoreFactorDOptimal()
    if resolve_response_model(response_model).has_cot:
        return ThetaTargetedInformation()
    return PosteriorExpectedInformation() if item_uncertainty else MaxFisherInformation()



def default_selector_for(items: ItemTable) -> ItemSelector:
    """The default selector of the bank behind ``items`` (what sessions and the CLI use).

    :class:`DoublyRobustSelection`: every step a known-probability design draw, weighted towards
    the items whose answer the model finds uncertain, so that ``predicted_score()`` is the
    design-based estimate with the model as its control variate, unbiased whatever the model gets
    wrong (docs/math.md §7.8). :class:`RandomisedSelection` (the same draws, its score labelled
    ``"design"``) when the bank's own cross-fitted score check found the model-based full-benchmark
    accuracy worse than the plain mean of as many random items at the longest length it checked
    (``ScoreCalibration.loses_to_random``; seen on banks calibrated on 8-22 LLMs; a check that did
    not measure the doubly robust rule decides by its adaptive rule's curve): its intervals then
    apply that selector's own stored trait curves."""
    choice = DoublyRobustSelection()
    adaptive = choice.adaptive_for(items)
    calib = items.interval_calibration
    # a check that measured only the adaptive rule (no doubly robust curve) decides by that rule's curve
    if calib is not None and calib.scores is not None:
        measured = choice.name if choice.name in calib.scores.curves else adaptive.name
        if calib.scores.loses_to_random(measured):
            return RandomisedSelection()
    return choice


__all__ = [
    "AOptimalInformation",
    "DrawContext",
    "DoublyRobustSelection",
    "ContentBalance",
    "DOptimalInformation",
    "EXPOSURE_CONTROLS",
    "ExposureContext",
    "ExposureControl",
    "ItemSelector",
    "ItemTable",
    "KullbackLeiblerIndex",
    "LaRTReplicationSelection",
    "MaxFisherInformation",
    "PosteriorExpectedInformation",
    "PosteriorWeightedInformation",
    "RandomSelection",
    "RandomisedSelection",
    "Randomesque",
    "SELECTORS",
    "ScoreFactorDOptimal",
    "SelectionState",
    "SympsonHetter",
    "ThetaTargetedInformation",
    "default_selector",
    "default_selector_for",
    "is_design_draw",
]
