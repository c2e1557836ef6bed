"""The calibrator contract shared by every fitting method (scikit-learn style).

A calibrator declares its settings (``SETTINGS``: name -> :class:`Setting`, one per constructor
argument), takes them in ``__init__`` and stores them unchanged. :meth:`BaseCalibrator.fit` is the
template every method shares:

1. checks every setting (:meth:`~BaseCalibrator.validated_settings`, then the method's
   cross-setting ``_check_settings``);
2. converts and checks the responses once (a :class:`calibration.ResponseData`; methods with
   ``accepts_arrays = True`` also take an (N, J) 0/1 array);
3. records the provenance (``subject_ids_``, ``item_ids_``, ``item_metadata_``, ``n_subjects_``,
   ``n_items_``), calls the method's ``_fit(data)``, then records ``responses_sha256_`` and the
   wall time ``elapsed_`` (seconds), and returns ``self``.

Every fitted calibrator exposes the same attributes (the contract suite
``tests/test_calibrator_contract.py`` checks them on every registered method):

==================  ============================================================================
``item_params_``    :class:`catengine.models.params.ItemParams` on the scale of ``theta_`` (None
                    only for fits a bank cannot hold: cBMM rank > 1, SAEM ``use_cot=False``)
``theta_``          (N,) abilities of the calibration subjects
``theta_sd_``       (N,) their posterior SDs (NaN where the method has none: cBMM's joint ML)
``converged_``      bool; reaching ``max_iter`` without meeting the tolerance also emits
                    :class:`ConvergenceWarning`
``n_iter_``         iterations (sweeps, SAEM iterations, epochs) run
``loss_trace_``     (n,) the quantity the stopping rule watches, one entry per recorded step
``elapsed_``        seconds spent in ``fit``
==================  ============================================================================

Every method exports through one template, :meth:`BaseCalibrator.to_item_bank` ``(bank_id, *,
interval_check="auto", item_metadata=None, keep_responses=False, **options)``: it checks the fit,
asks the method's hook ``_bank_parts(**options)`` for what only the method knows (a
:class:`BankParts`: response model, recorded settings, scale record, parameter arrays, item flags,
the ``/subjects``, ``/calibration`` and ``/posterior`` groups), builds the bank with the fit's
provenance, runs the held-out check (``calibration.heldout.with_held_out_check``, whose fold refits
export with the same options) and keeps the training responses when asked. ``options`` are the
keyword arguments the hook declares (cBMM ``include_subjects``; SAEM ``scale``; PSN ``standardize``,
``include_features``), listed by :meth:`~BaseCalibrator.bank_options`.

Settings serialise one way: :meth:`~BaseCalibrator.to_config` gives ``{"type": method name,
setting: JSON value, ...}`` (the engine's strategy-config pattern, ``catengine.session.config``)
and :meth:`~BaseCalibrator.from_config` rebuilds an equal calibrator. A bank stores the settings
part as its ``calibration_settings`` (plus descriptive notes and, for methods with export options,
``EXPORT_SETTINGS`` such as PSN's ``standardize``), and recalibration restores it from there.
"""

from __future__ import annotations

import argparse
import inspect
import time
import warnings
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from catengine.console import progress_bar_visible
from catengine.errors import CatEngineError
from catengine.validation import (
    boolean,
    finite_at_least,
    integer_at_least,
    one_of,
    positive_finite,
    seed_like,
)


class ConvergenceWarning(UserWarning):
    """The fit stopped at ``max_iter`` before meeting its convergence tolerance."""


class NotFittedError(CatEngineError, AttributeError):
    """A fitted attribute or export was requested before ``fit``."""


#: fitted attributes every calibrator sets (see the module docstring)
FITTED_ATTRIBUTES = ("item_params_", "theta_", "theta_sd_", "converged_", "n_iter_", "loss_trace_", "elapsed_")
#: provenance attributes recorded by ``BaseCalibrator.fit``
PROVENANCE_ATTRIBUTES = ("subject_ids_", "item_ids_", "item_metadata_", "n_subjects_", "n_items_", "responses_sha256_")


# ----------------------------------------------------------------------------- settings


@dataclass(frozen=True)
class Setting:
    """One constructor setting: how it is checked and how the command line offers it.

    ``check(value, name)`` returns the value (normalised) or raises ValueError / TypeError naming
    the setting. ``flag`` is the ``calibration fit`` option (None: not offered there); ``type``
    parses its text (default: the type of the constructor default); ``choices`` restricts it;
    a bool setting becomes a switch (``store_true``), or with ``switch_value`` a switch that sets
    that value (``--reference-head`` sets ``ordered_asymptotes=False``, ``--float64`` sets
    ``dtype="float64"``); ``from_cli`` maps the parsed value to the setting (``--b-prior-sd 0``
    means None).
    """

    check: Callable[[Any, str], Any]
    help: str = ""
    flag: str | None = None
    type: Callable[[str], Any] | None = None
    choices: tuple | None = None
    switch_value: Any = None
    from_cli: Callable[[Any], Any] | None = None
    metavar: str | None = None


def _cli_integer(low: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be an integer >= {low}, got {text}")
        return value

    parse.__name__ = "int"
    return parse


def integer(low: int = 1, help: str = "", flag: str | None = None) -> Setting:
    """An integer setting >= ``low``."""
    return Setting(lambda v, n: integer_at_least(v, n, low), help, flag, type=_cli_integer(low))


def positive(help: str = "", flag: str | None = None, **cli) -> Setting:
    """A finite number > 0."""
    return Setting(positive_finite, help, flag, type=float, **cli)


def non_negative(help: str = "", flag: str | None = None, **cli) -> Setting:
    """A finite number >= 0."""
    return Setting(lambda v, n: finite_at_least(v, n, 0.0), help, flag, type=float, **cli)


def optional(setting: Setting) -> Setting:
    """``setting`` that may also be None."""
    inner = setting.check
    return Setting(lambda v, n: None if v is None else inner(v, n), setting.help, setting.flag, setting.type,
                   setting.choices, setting.switch_value, setting.from_cli, setting.metavar)


def choice(choices, help: str = "", flag: str | None = None, **cli) -> Setting:
    """One of ``choices``."""
    choices = tuple(choices)
    return Setting(lambda v, n: one_of(v, n, choices), help, flag, choices=choices, **cli)


def switch(help: str = "", flag: str | None = None, **cli) -> Setting:
    """A bool."""
    return Setting(boolean, help, flag, **cli)


def seed(help: str = "randomness: a numpy Generator, an int seed or None") -> Setting:
    """The ``rng`` setting (the command line's ``--seed``)."""
    return Setting(seed_like, help)


def _json_value(value):
    """A setting's value as JSON (numpy scalars as Python ones, a Generator by its type)."""
    if isinstance(value, np.random.Generator):
        return f"numpy.random.Generator({type(value.bit_generator).__name__})"
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, tuple):
        return [_json_value(v) for v in value]
    return value


@dataclass
class BankParts:
    """What a method's ``_bank_parts`` hook gives :meth:`BaseCalibrator.to_item_bank`.

    ``response_model`` of the bank; ``settings``: its ``calibration_settings`` (usually
    :meth:`BaseCalibrator.bank_settings`); ``scale``: its ``scale`` record; ``arrays``: the
    keyword arguments of ``ItemBank.from_params`` for the item parameters, their uncertainty
    (``a_sd``, ..., ``uncertainty_method``), ``rho`` and ``cot_offset``; ``item_vars``: per-item
    flags and counts; ``groups``: the ``subjects``, ``calibration`` and ``posterior`` datasets
    (None or left out: the bank has no such group)."""

    response_model: str
    settings: dict
    scale: dict
    arrays: dict
    item_vars: dict | None = None
    groups: dict = field(default_factory=dict)


# ----------------------------------------------------------------------------- template


class BaseCalibrator(ABC):
    """Base class: declared settings, the ``fit`` template, provenance, config round trip.

    Progress bars: a calibrator's bar shows when ``progress=True`` was passed (to the constructor
    or :meth:`set_params`); when ``progress`` is left at its default, the bar shows only where it
    can be seen (:func:`progress_bar_visible`: a terminal or a notebook), never in logs or pipes.
    """

    def __new__(cls, *args, **kwargs):
        self = super().__new__(cls)
        names = cls._param_names()
        #: whether the caller chose ``progress`` (else its default applies only where a bar is seen)
        self._progress_given = "progress" in kwargs or ("progress" in names and names.index("progress") < len(args))
        return self

    #: registry name of the method (``calibration.methods.METHODS``), the bank's calibration_method
    method_name: str = ""
    #: constructor settings: name -> Setting (every ``__init__`` argument has one)
    SETTINGS: dict[str, Setting] = {}
    #: options of ``to_item_bank`` that the bank records and recalibration repeats
    EXPORT_SETTINGS: dict[str, Setting] = {}
    #: whether ``fit`` also takes an (N, J) array of 0/1 (-1 or NaN missing)
    accepts_arrays: bool = False
    #: whether the held-out check (``calibration.heldout``) widens the bank's ``b_sd`` to the spread of
    #: its fold refits when that is wider (a method whose item SDs are a posterior's, e.g. PSN)
    held_out_widens_b_sd: bool = False

    # ------------------------------------------------------------------ settings
    @classmethod
    def _param_names(cls) -> list[str]:
        sig = inspect.signature(cls.__init__)
        return [
            p.name
            for p in sig.parameters.values()
            if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        ]

    @classmethod
    def default_settings(cls) -> dict:
        """The constructor defaults."""
        sig = inspect.signature(cls.__init__)
        return {name: sig.parameters[name].default for name in cls._param_names()}

    def _store_settings(self, arguments: dict) -> None:
        """Keep every constructor argument unchanged as the attribute of its name (a method's
        ``__init__`` is ``self._store_settings(locals())``)."""
        for name in self._param_names():
            setattr(self, name, arguments[name])

    def get_params(self) -> dict:
        """The constructor settings, as given."""
        return {name: getattr(self, name) for name in self._param_names()}

    def set_params(self, **params) -> "BaseCalibrator":
        """Change settings (names must be constructor arguments); returns ``self``."""
        unknown = sorted(set(params) - set(self._param_names()))
        if unknown:
            raise ValueError(f"unknown setting(s) {unknown} for {type(self).__name__}; allowed: {self._param_names()}")
        for name, value in params.items():
            setattr(self, name, value)
        if "progress" in params:
            self._progress_given = True
        return self

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({args})"

    def validated_settings(self) -> dict:
        """Every setting checked by its declared :class:`Setting` (normalised values)."""
        values = {}
        for name, value in self.get_params().items():
            setting = self.SETTINGS.get(name)
            values[name] = value if setting is None else setting.check(value, name)
        self._check_settings(values)
        return values

    def _check_settings(self, values: dict) -> None:
        """Checks that involve several settings (override; raise ValueError)."""

    def to_config(self) -> dict:
        """``{"type": method name, setting: JSON value, ...}``: every constructor setting, checked and
        normalised (an integer-valued float setting is recorded as a float)."""
        return {"type": self.method_name, **{k: _json_value(v) for k, v in self.validated_settings().items()}}

    @classmethod
    def from_config(cls, config: dict, *, ignore_unknown: bool = False) -> "BaseCalibrator":
        """The calibrator that :meth:`to_config` described.

        ``config`` may omit ``"type"``; given, it must name this method. Keys that are not settings
        raise ValueError unless ``ignore_unknown`` (a bank's settings also hold descriptive notes).
        An ``rng`` recorded as a Generator (its state is not recorded) comes back as None.
        """
        config = dict(config)
        kind = config.pop("type", cls.method_name)
        if kind != cls.method_name:
            from calibration.methods import get_method

            if get_method(kind).name != cls.method_name:
                raise ValueError(f"config of method {kind!r} given to {cls.__name__} ({cls.method_name!r})")
        names = set(cls._param_names())
        unknown = sorted(set(config) - names)
        if unknown and not ignore_unknown:
            raise ValueError(f"unknown setting(s) {unknown} for {cls.__name__}; allowed: {sorted(names)}")
        kwargs = {k: v for k, v in config.items() if k in names}
        if isinstance(kwargs.get("rng"), str):
            kwargs["rng"] = None
        for name, value in kwargs.items():
            if isinstance(value, list):
                kwargs[name] = tuple(value)
        return cls(**kwargs)

    def bank_settings(self, notes: dict | None = None, **export) -> dict:
        """The ``calibration_settings`` a bank records: the config without ``type``, then the
        export options (``EXPORT_SETTINGS``) used, then descriptive ``notes``."""
        out = {k: v for k, v in self.to_config().items() if k != "type"}
        for name, value in export.items():
            if name not in self.EXPORT_SETTINGS:
                raise ValueError(f"{name!r} is not an export option of {type(self).__name__}")
            out[name] = _json_value(value)
        out.update(notes or {})
        return out

    def _bank_from_params(self, response_model: str, bank_id: str, settings: dict, scale: dict, **content):
        """``catengine.ItemBank.from_params`` with the fit's provenance: item ids, method name,
        ``settings`` (the ``calibration_settings``), SHA-256 of the responses and number of
        subjects; ``content``: the parameters, groups and metadata of the bank."""
        from catengine.itembank import ItemBank

        return ItemBank.from_params(
            response_model,
            self.item_ids_,
            bank_id=bank_id,
            calibration_method=self.method_name,
            calibration_settings=settings,
            responses_sha256=self.responses_sha256_,
            n_subjects=int(self.n_subjects_),
            scale=scale,
            **content,
        )

    # ------------------------------------------------------------------ export
    def to_item_bank(self, bank_id: str, *, interval_check="auto", item_metadata: dict | None = None,
                     keep_responses: bool = False, **options):
        """The fitted :class:`catengine.ItemBank` (not yet written; see ``catengine.write_item_bank``).

        ``interval_check`` ("auto" | True | False): run the held-out check and store it
        (``calibration.heldout.with_held_out_check``; 5 refits plus replays; "auto" runs it when the
        calibration has enough LLMs, else the bank records why not). ``item_metadata``: per-item
        string fields (name -> (J,) values) added to, or replacing, those of the responses.
        ``keep_responses``: keep the training responses as ``/responses`` (what recalibration
        merges with). ``options``: the method's own export options (:meth:`bank_options`; cBMM
        ``include_subjects``, SAEM ``scale``, PSN ``standardize`` and ``include_features``); the
        check's fold banks are made with the same ``item_metadata`` and ``options``.
        """
        self._check_fitted()
        unknown = sorted(set(options) - set(self.bank_options()))
        if unknown:
            raise TypeError(f"{type(self).__name__}.to_item_bank got unknown option(s) {unknown}; its own options: "
                            f"{sorted(self.bank_options())} (and interval_check, item_metadata, keep_responses)")
        parts = self._bank_parts(**options)
        meta = dict(self.item_metadata_)
        meta.update(item_metadata or {})
        bank = self._bank_from_params(parts.response_model, bank_id, parts.settings, parts.scale,
                                      item_metadata=meta or None, item_vars=parts.item_vars,
                                      **parts.groups, **parts.arrays)
        from calibration.heldout import with_held_out_check

        bank = with_held_out_check(self, bank, interval_check, item_metadata=item_metadata, **options)
        if keep_responses:
            bank = bank.with_group("responses", self.training_data_.to_dataset())
        return bank

    @abstractmethod
    def _bank_parts(self, **options) -> BankParts:
        """The method's part of :meth:`to_item_bank` on a fitted calibrator: declare the method's
        export options as keyword-only arguments with defaults; raise ValueError for a fit a bank
        cannot hold."""

    @classmethod
    def bank_options(cls) -> dict:
        """The method's own options of :meth:`to_item_bank`: name -> default (the keyword arguments
        of its ``_bank_parts``)."""
        parameters = inspect.signature(cls._bank_parts).parameters.values()
        return {p.name: p.default for p in parameters if p.kind is p.KEYWORD_ONLY}

    @classmethod
    def export_options(cls, settings: dict) -> dict:
        """The export options recorded in a bank's ``calibration_settings`` (for recalibration)."""
        return {k: settings[k] for k in cls.EXPORT_SETTINGS if k in settings}

    # ------------------------------------------------------------------ fit
    def _as_response_data(self, responses):
        from calibration.data import ResponseData

        if isinstance(responses, ResponseData):
            return responses
        if self.accepts_arrays and isinstance(responses, (np.ndarray, list, tuple)):
            return ResponseData.from_arrays(responses)
        also = " (or an (N, J) array of 0/1 with -1 or NaN for missing)" if self.accepts_arrays else ""
        raise TypeError(f"fit expects a calibration.ResponseData{also}, got {type(responses).__name__}")

    def fit(self, responses) -> "BaseCalibrator":
        """Fit to a :class:`calibration.ResponseData` and return ``self`` (see the module docstring)."""
        self.validated_settings()
        data = self._as_response_data(responses)
        self._fitted = False
        self.subject_ids_ = data.subject_ids
        self.item_ids_ = data.item_ids
        self.item_metadata_ = dict(data.item_metadata)
        self.n_subjects_, self.n_items_ = data.n_subjects, data.n_items
        _check_informative(data)
        self.convergence_warnings_ = []
        start = time.perf_counter()
        chosen = getattr(self, "progress", None)
        hide_bar = (isinstance(chosen, bool) and chosen and not getattr(self, "_progress_given", True)
                    and not progress_bar_visible())
        if hide_bar:  # the default: no bar where nobody can see it (the setting itself is kept)
            self.progress = False
        try:
            self._fit(data)
        finally:
            if hide_bar:
                self.progress = chosen
        self.elapsed_ = time.perf_counter() - start
        self.responses_sha256_ = data.sha256()
        self.training_data_ = data  # for the held-out check of to_item_bank
        self._fitted = True
        return self

    @abstractmethod
    def _fit(self, data) -> None:
        """The method's own work on checked settings and a ResponseData: set the fitted attributes."""

    def _check_fitted(self) -> None:
        if not getattr(self, "_fitted", False):
            raise NotFittedError(f"this {type(self).__name__} is not fitted yet; call fit(responses) first")

    #: True on the held-out check's fold refits: their convergence warnings are kept in
    #: ``convergence_warnings_`` and not shown (refits run on worker threads, where
    #: ``warnings.catch_warnings`` cannot tell one fit's warnings from another's)
    quiet_convergence: bool = False

    def _warn_convergence(self, message: str, stacklevel: int = 2) -> None:
        """Issue a :class:`ConvergenceWarning` (unless ``quiet_convergence``) and keep its message in
        ``convergence_warnings_`` (emptied by every ``fit``); ``stacklevel`` as for ``warnings.warn``,
        counted from the caller."""
        if not hasattr(self, "convergence_warnings_"):
            self.convergence_warnings_ = []
        self.convergence_warnings_.append(message)
        if not self.quiet_convergence:
            warnings.warn(message, ConvergenceWarning, stacklevel=stacklevel + 1)

    def _warn_not_converged(self, max_iter: int, detail: str = "") -> None:
        msg = f"{type(self).__name__} stopped at max_iter={max_iter} without meeting its tolerance"
        self._warn_convergence(msg + (f" ({detail})" if detail else ""), stacklevel=4)

    def fit_summary(self, data) -> str:
        """One line about the fit for the command line."""
        return (f"{type(self).__name__}: {data.n_subjects} subjects x {data.n_items} items, {self.n_iter_} iterations, "
                f"converged={self.converged_}, {self.elapsed_:.1f} s")


__all__ = [
    "FITTED_ATTRIBUTES",
    "BankParts",
    "BaseCalibrator",
    "ConvergenceWarning",
    "NotFittedError",
    "Setting",
    "choice",
    "integer",
    "non_negative",
    "optional",
    "positive",
    "seed",
    "switch",
]


def _check_informative(data) -> None:
    """What every method needs from the responses before it starts: each item answered by someone,
    and at least one item that some LLMs got right and others wrong (otherwise nothing separates
    the LLMs, and a fit would report parameters the data do not contain)."""
    from catengine.responses.data import MISSING

    correct = data.correct
    unanswered = np.flatnonzero(~(correct != MISSING).any(axis=0))
    if unanswered.size:
        shown = ", ".join(repr(data.item_ids[k]) for k in unanswered[:5]) + (" ..." if unanswered.size > 5 else "")
        raise ValueError(f"{unanswered.size} item(s) have no observed response (correct / incorrect) ({shown}); "
                         "drop them before calibrating")
    if not np.any((correct == 1).any(axis=0) & (correct == 0).any(axis=0)):
        raise ValueError(f"nothing to calibrate: on each of the {data.n_items} items every observed answer is the same "
                         "(all correct or all wrong), so the answers say nothing about how the LLMs differ")
