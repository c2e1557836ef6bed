"""``ItemBank``: an immutable, validated wrapper of an xarray DataTree following schema v2 (v1 still read)."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from functools import cached_property

import numpy as np
import xarray as xr

from catengine.errors import ItemBankSchemaError
from catengine.itembank.schema import (
    ITEM_PARAMETERS,
    PARAMETER_DESCRIPTIONS,
    SCHEMA_NAME,
    SCHEMA_VERSION,
    name_problem,
    UNCERTAINTY_DESCRIPTIONS,
    UNCERTAINTY_DRAW_VARIABLES,
    UNCERTAINTY_ITEM_VARIABLES,
    validate_tree,
)
from catengine.models.params import ItemParams, ItemUncertainty


def _library_version() -> str:
    from catengine import __version__

    return __version__


def _json_attr(value) -> str:
    return json.dumps(value if value is not None else {}, sort_keys=True, default=_json_default)


def _json_default(obj):
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    raise TypeError(f"{type(obj).__name__} is not JSON serialisable: {obj!r}")


DEFAULT_COT_OFFSET = 1.0  # log(T + 1): a zero-token CoT stays finite


class ItemBank:
    """A calibrated item bank (read-only).

    Build one with :meth:`from_params` (after a calibration) or :func:`catengine.open_item_bank`
    (from disk); store it with :func:`catengine.write_item_bank`. Every accessor returns a copy or
    a read-only array, so a bank never changes after construction.
    """

    __slots__ = ("_tree", "_source", "__dict__")

    def __init__(self, tree: xr.DataTree, *, source: str = "<memory>"):
        try:
            problems = validate_tree(tree)
        except Exception as exc:  # noqa: BLE001 - a value no check foresaw is still a named schema error
            problems = [f"cannot be validated ({type(exc).__name__}: {exc})"]
        if problems:
            raise ItemBankSchemaError(source, problems)
        self._tree = tree.copy(deep=True)
        self._source = source
        try:
            self.params  # noqa: B018 - builds and validates ItemParams (value ranges)
        except ValueError as exc:
            raise ItemBankSchemaError(source, [str(exc)]) from exc

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_params(
        cls,
        response_model: str,
        item_ids,
        *,
        bank_id: str,
        calibration_method: str = "",
        calibration_settings: dict | None = None,
        responses_sha256: str = "",
        n_subjects: int = 0,
        scale: dict | None = None,
        item_metadata: dict | None = None,
        item_vars: dict | None = None,
        subjects: xr.Dataset | None = None,
        calibration: xr.Dataset | None = None,
        posterior: xr.Dataset | None = None,
        responses: xr.Dataset | None = None,
        rho: float = 0.0,
        cot_offset: float | None = None,
        uncertainty_method: str = "",
        **arrays,
    ) -> "ItemBank":
        """Build a bank from parameter arrays, e.g. ``from_params("2pl", ids, bank_id="x", a=a, b=b)``.

        ``arrays`` holds the item parameters of ``response_model`` (a, b; c, d for 4pl; omega,
        phi, lam for lart) and optionally their uncertainty (schema v2): per-item ``a_sd``, ``b_sd``,
        ``ab_cov`` (and ``omega_sd``, ``phi_sd``, ``omega_phi_cov`` for lart), and ``a_draws``,
        ``b_draws`` of shape (n_draws, J), stored in ``/posterior`` with dims ("draw", "item");
        ``uncertainty_method`` says how they were obtained. ``item_metadata`` maps a field name to (J,)
        strings; ``item_vars`` to other (J,) numeric per-item variables (e.g. 0/1 flags).
        ``responses`` (optional) keeps the calibration data, as made by
        ``calibration.ResponseData.to_dataset()``, so that the bank can be recalibrated later.
        """
        problem = name_problem(bank_id, "bank_id")
        if problem:
            raise ValueError(f"{problem}; a bank_id is a non-empty string without spaces or path separators")
        item_ids = np.asarray([str(v) for v in item_ids], dtype=object)
        uncertainty_arrays = {k: arrays.pop(k) for k in UNCERTAINTY_ITEM_VARIABLES + UNCERTAINTY_DRAW_VARIABLES if k in arrays}
        params = ItemParams(response_model, rho=rho, **arrays)  # validates names, shapes, finiteness
        if params.n_items != item_ids.size:
            raise ValueError(f"{item_ids.size} item ids given for {params.n_items} items")
        uncertainty_vars, draw_vars = _uncertainty_variables(params.n_items, uncertainty_method, uncertainty_arrays)
        data_vars = {}
        for name in params.parameter_names:
            long_name, description = PARAMETER_DESCRIPTIONS[name]
            data_vars[name] = ("item", np.array(getattr(params, name)), {"long_name": long_name, "description": description})
        data_vars["rho"] = ((), np.float64(params.rho), dict(zip(("long_name", "description"), PARAMETER_DESCRIPTIONS["rho"])))
        data_vars.update(uncertainty_vars)
        for key, values in (item_metadata or {}).items():
            data_vars[str(key)] = ("item", np.asarray([str(v) for v in values], dtype=object), {"long_name": f"item metadata: {key}"})
        for key, values in (item_vars or {}).items():
            values = np.asarray(values)
            if values.dtype == bool:
                values = values.astype(np.int8)
            data_vars[str(key)] = (("item",) + tuple(f"{key}_dim{k}" for k in range(1, values.ndim)), values)
        items = xr.Dataset(data_vars, coords={"item": ("item", item_ids, {"long_name": "item id"})})
        if uncertainty_vars and uncertainty_method:
            items.attrs["uncertainty_method"] = str(uncertainty_method)
        posterior = _with_draws(posterior, draw_vars, item_ids, uncertainty_method)
        attrs = {
            "schema": SCHEMA_NAME,
            "schema_version": SCHEMA_VERSION,
            "bank_id": bank_id,
            "bank_version": 0,
            "parent_version": 0,
            "response_model": params.response_model,
            "response_function": params.model.response_function,
            "calibration_method": calibration_method,
            "calibration_settings": _json_attr(calibration_settings),
            "responses_sha256": responses_sha256,
            "n_subjects": int(n_subjects),
            "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "library_version": _library_version(),
            "scale": _json_attr(scale),
        }
        if params.model.has_cot:
            attrs["cot_offset"] = float(DEFAULT_COT_OFFSET if cot_offset is None else cot_offset)
            attrs["lambda_is"] = "standard deviation (lambda_sd)"
        groups = {"/": xr.Dataset(attrs=attrs), "/items": items}
        optional = (("posterior", posterior), ("subjects", subjects), ("calibration", calibration), ("responses", responses))
        for name, group in optional:
            if group is not None:
                if not isinstance(group, xr.Dataset):
                    raise TypeError(f"{name} must be an xarray.Dataset, got {type(group).__name__}")
                groups[f"/{name}"] = group
        return cls(xr.DataTree.from_dict(groups))

    def with_group(self, name: str, dataset: xr.Dataset) -> "ItemBank":
        """A new bank with the optional group ``name`` (posterior, subjects, calibration, responses) set."""
        if name not in ("posterior", "subjects", "calibration", "responses"):
            raise ValueError(f"{name!r} is not an optional group; choose posterior, subjects, calibration or responses")
        if not isinstance(dataset, xr.Dataset):
            raise TypeError(f"{name} must be an xarray.Dataset, got {type(dataset).__name__}")
        tree = self._tree.copy(deep=True)
        tree[name] = xr.DataTree(dataset)
        return ItemBank(tree, source=self._source)

    def replace_attrs(self, **attrs) -> "ItemBank":
        """A new bank with some root attributes replaced (used by the writer to stamp versions)."""
        tree = self._tree.copy(deep=True)
        tree.attrs.update(attrs)
        return ItemBank(tree, source=self._source)

    # ------------------------------------------------------------------ accessors
    def to_datatree(self) -> xr.DataTree:
        """A deep copy of the underlying DataTree (groups /, /items and optional others)."""
        return self._tree.copy(deep=True)

    def _group(self, name: str) -> xr.Dataset | None:
        if name not in self._tree.children:
            return None
        return self._tree[name].to_dataset().copy(deep=True)

    @property
    def items(self) -> xr.Dataset:
        return self._group("items")

    @property
    def subjects(self) -> xr.Dataset | None:
        return self._group("subjects")

    @property
    def posterior(self) -> xr.Dataset | None:
        return self._group("posterior")

    @property
    def calibration(self) -> xr.Dataset | None:
        return self._group("calibration")

    @property
    def responses(self) -> xr.Dataset | None:
        """The calibration responses, when the bank keeps them (see ``calibration.ResponseData.from_dataset``)."""
        return self._group("responses")

    @property
    def attrs(self) -> dict:
        """Root attributes as plain Python values."""
        return {k: (v.item() if isinstance(v, np.generic) else v) for k, v in self._tree.attrs.items()}

    @property
    def source(self) -> str:
        return self._source

    @property
    def bank_id(self) -> str:
        return self._tree.attrs["bank_id"]

    @property
    def version(self) -> int:
        """Version number on disk (>= 1), or 0 for a bank that has not been written yet."""
        return int(self._tree.attrs["bank_version"])

    @property
    def parent_version(self) -> int:
        return int(self._tree.attrs["parent_version"])

    @property
    def response_model(self) -> str:
        return self._tree.attrs["response_model"]

    @property
    def cot_offset(self) -> float | None:
        value = self._tree.attrs.get("cot_offset")
        return None if value is None else float(value)

    @property
    def effective_cot_offset(self) -> float:
        """The offset in log(T + offset) that scoring and simulation use: the bank's (0.0 included),
        or the default 1.0 when it records none (non-LaRT banks)."""
        value = self.cot_offset
        return DEFAULT_COT_OFFSET if value is None else value

    @property
    def calibration_settings(self) -> dict:
        return json.loads(self._tree.attrs["calibration_settings"])

    @property
    def scale(self) -> dict:
        return json.loads(self._tree.attrs["scale"])

    @cached_property
    def item_ids(self) -> tuple[str, ...]:
        return tuple(str(v) for v in self._tree["items"]["item"].values)

    @property
    def n_items(self) -> int:
        return len(self.item_ids)

    @cached_property
    def params(self) -> ItemParams:
        """The response-model parameters as frozen arrays (what the numerics consume)."""
        items = self._tree["items"]
        arrays = {name: items[name].values for name in ITEM_PARAMETERS[self.response_model]}
        rho = float(items["rho"].values) if "rho" in items.data_vars else 0.0
        return ItemParams(self.response_model, rho=rho, **arrays)

    @cached_property
    def item_uncertainty(self) -> ItemUncertainty | None:
        """The item-parameter uncertainty the bank stores (schema v2), or None when it has none.

        SDs and covariances come from ``/items`` (``a_sd``, ``b_sd``, ``ab_cov``, ``omega_sd``,
        ``phi_sd``, ``omega_phi_cov``), draws from ``/posterior`` (``a_draws``, ``b_draws``).
        """
        items = self._tree["items"]
        kwargs = {name: items[name].values for name in UNCERTAINTY_ITEM_VARIABLES if name in items.data_vars}
        method = str(items.attrs.get("uncertainty_method", ""))
        if "posterior" in self._tree.children:
            post = self._tree["posterior"]
            for name in UNCERTAINTY_DRAW_VARIABLES:
                if name in post.data_vars:
                    kwargs[name] = post[name].transpose("draw", "item").values
            method = method or str(post.attrs.get("draws_method", ""))
        if not kwargs:
            return None
        return ItemUncertainty(self.n_items, method=method, **kwargs)

    @cached_property
    def score_factors(self):
        """The bank's score-factor model (``catengine.models.score_factors.ScoreFactors``), or None.

        Stored as '/items/score_loading' (item, score_factor) and '/items/score_intercept'; the root
        attribute ``score_factors`` (JSON) records how they were fitted (docs/score_prediction.md §2)."""
        from catengine.models.score_factors import ScoreFactors

        items = self._tree["items"]
        if "score_loading" not in items.data_vars:
            return None
        return ScoreFactors(items["score_loading"].transpose("item", "score_factor").values,
                            items["score_intercept"].values)

    def with_score_factors(self, loadings, intercepts, record: dict) -> "ItemBank":
        """A new bank that carries the score-factor model (loadings (J, d), intercepts (J,)) and
        its fitting ``record`` (root attribute ``score_factors``, JSON)."""
        from catengine.models.score_factors import ScoreFactors

        factors = ScoreFactors(loadings, intercepts)  # validates shapes and finiteness
        if factors.n_items != self.n_items:
            raise ValueError(f"score factors have {factors.n_items} items, the bank {self.n_items}")
        tree = self._tree.copy(deep=True)
        items = tree["items"].to_dataset()
        items["score_loading"] = (("item", "score_factor"), np.array(factors.loadings),
                                  {"long_name": "score-factor loading",
                                   "description": "loading g_j of the d-factor logistic model P = logistic(g_j . eta + h_j), "
                                                  "eta ~ Normal(0, I), used for the full-benchmark score"})
        items["score_intercept"] = ("item", np.array(factors.intercepts),
                                    {"long_name": "score-factor intercept", "description": "intercept h_j of the same model"})
        tree["items"] = xr.DataTree(items)
        tree.attrs["score_factors"] = _json_attr(record)
        return ItemBank(tree, source=self._source)

    # ------------------------------------------------------------------ item content (schema v3)
    @property
    def has_content(self) -> bool:
        """Whether the bank knows its items: what each asks, its reference answer and how it is graded."""
        return "content" in self._tree.children

    @cached_property
    def protocol(self) -> dict | None:
        """The administration protocol (prompt templates, answer extraction, grader and version, how the
        calibration LLMs were run), or None for a bank without item content."""
        from catengine.itembank.content import PROTOCOL_ATTR

        value = self._tree.attrs.get(PROTOCOL_ATTR)
        return None if value is None else json.loads(value)

    @cached_property
    def _contents(self) -> tuple:
        from catengine.itembank.content import contents_from_dataset

        if not self.has_content:
            return ()
        return tuple(contents_from_dataset(self._tree["content"].to_dataset()))

    def content(self, item_id: str):
        """What item ``item_id`` asks and how it is graded (:class:`catengine.itembank.content.ItemContent`).

        Raises KeyError naming the id when it is not in the bank, and LookupError when the bank holds no
        item content (banks written before schema v3, or fitted from a matrix alone)."""
        k = self.index_of(item_id)
        if not self.has_content:
            raise LookupError(f"bank {self.bank_id!r} holds no item content (questions, answers, protocol); "
                              "attach it with ItemBank.with_content(...)")
        return self._contents[k]

    def contents(self) -> tuple:
        """Every item's :class:`~catengine.itembank.content.ItemContent`, in bank order (empty without content)."""
        return self._contents

    def prompt(self, item_id: str) -> str:
        """The prompt that puts item ``item_id`` to an LLM under the bank's protocol."""
        from catengine.itembank.content import render_prompt

        return render_prompt(self.content(item_id), self.protocol)

    def with_content(self, contents, protocol: dict) -> "ItemBank":
        """A new bank that carries ``contents`` (one :class:`ItemContent` per item, in bank order) and
        the administration ``protocol`` (a dict: ``prompts``, ``answer_extraction``, ``grader`` ...)."""
        from catengine.itembank.content import PROTOCOL_ATTR, content_dataset, protocol_problems

        problems = protocol_problems(protocol)
        if problems:
            raise ValueError("; ".join(problems))
        tree = self._tree.copy(deep=True)
        tree["content"] = xr.DataTree(content_dataset(list(contents), self.item_ids))
        tree.attrs[PROTOCOL_ATTR] = _json_attr(protocol)
        tree.attrs["schema_version"] = SCHEMA_VERSION
        return ItemBank(tree, source=self._source)

    def with_content_file(self, path) -> "ItemBank":
        """A new bank (in memory) whose questions come from the JSON-lines file ``path`` (a user's copy
        of the problems, for banks that ship only each question's sha256): every text is verified
        against the bank's record; the error names each item whose text does not match."""
        from catengine.itembank.content import attach_questions

        if not self.has_content:
            raise LookupError(f"bank {self.bank_id!r} holds no item content to attach questions to")
        prefix = self.item_ids[0].split("/", 1)[0] if "/" in self.item_ids[0] else ""
        contents = attach_questions(list(self._contents), path, prefix=prefix)
        return self.with_content(contents, self.protocol)

    def item_metadata(self, field: str) -> np.ndarray:
        """A per-item metadata or extra variable as a read-only array (raises KeyError naming the fields)."""
        items = self._tree["items"]
        if field not in items.data_vars:
            available = sorted(set(items.data_vars) - {"rho"})
            raise KeyError(f"bank {self.bank_id!r} has no per-item field {field!r}; available: {available}")
        out = np.array(items[field].values)
        out.flags.writeable = False
        return out

    @cached_property
    def _index(self) -> dict[str, int]:
        return {item: k for k, item in enumerate(self.item_ids)}

    def index_of(self, item_id: str) -> int:
        """Position of ``item_id`` in the bank (raises KeyError naming the id)."""
        try:
            return self._index[str(item_id)]
        except KeyError:
            raise KeyError(f"item {item_id!r} is not in bank {self.bank_id!r} ({self.n_items} items)") from None

    def difficulty(self) -> np.ndarray:
        """Display difficulty -b/a (NaN where a = 0: non-discriminating items)."""
        p = self.params
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(p.a != 0, -p.b / np.where(p.a != 0, p.a, 1.0), np.nan)

    def __repr__(self) -> str:
        version = f"v{self.version}" if self.version else "unsaved"
        groups = ", ".join(sorted(set(self._tree.children) - {"items"})) or "none"
        return (
            f"ItemBank({self.bank_id!r} {version}, {self.response_model}, {self.n_items} items, "
            f"method={self.attrs['calibration_method'] or 'n/a'}, optional groups: {groups})"
        )



def _uncertainty_variables(n_items: int, method: str, arrays: dict):
    """Validate the uncertainty arrays (via ItemUncertainty) and return the /items variables and draws."""
    if not arrays:
        return {}, {}
    unc = ItemUncertainty(n_items, method=method, **arrays)
    item_vars, draw_vars = {}, {}
    for name in UNCERTAINTY_ITEM_VARIABLES:
        value = getattr(unc, name)
        if value is not None:
            item_vars[name] = ("item", np.array(value), dict(zip(("long_name", "description"), UNCERTAINTY_DESCRIPTIONS[name])))
    for name in UNCERTAINTY_DRAW_VARIABLES:
        value = getattr(unc, name)
        if value is not None:
            draw_vars[name] = (("draw", "item"), np.array(value), dict(zip(("long_name", "description"), UNCERTAINTY_DESCRIPTIONS[name])))
    return item_vars, draw_vars


def _with_draws(posterior: xr.Dataset | None, draw_vars: dict, item_ids, method: str) -> xr.Dataset | None:
    """The /posterior group with the parameter draws added (a new group when there was none)."""
    if not draw_vars:
        return posterior
    if posterior is not None and not isinstance(posterior, xr.Dataset):
        raise TypeError(f"posterior must be an xarray.Dataset, got {type(posterior).__name__}")
    draws = xr.Dataset(draw_vars, coords={"item": ("item", item_ids, {"long_name": "item id"})})
    if method:
        draws.attrs["draws_method"] = str(method)
    if posterior is None:
        return draws
    clash = sorted(set(draw_vars) & set(posterior.data_vars))
    if clash:
        raise ValueError(f"posterior already holds {clash}; pass the draws either in posterior or as arguments, not both")
    merged = posterior.copy()
    for name, var in draws.data_vars.items():
        merged[name] = var
    merged.attrs.update(draws.attrs)
    return merged
