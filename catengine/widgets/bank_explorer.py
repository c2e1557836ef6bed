"""``BankExplorer``: browse an item bank — sortable item table, item curves, parameter distributions.

Everything shown comes from the bank and ``catengine.models``: difficulty from
``ItemBank.difficulty()``, information from ``models.fisher_information`` (and
``models.expected_information.expected_item_information`` for banks with a posterior of b),
probabilities from ``models.prob_correct``, the CoT information of LaRT items from the bank's
response model (``params.model.cot_information``). The widget only sorts, formats and plots.
"""

from __future__ import annotations

import dataclasses
from statistics import NormalDist

import ipywidgets as widgets
import numpy as np

from catengine.models import fisher_information, prob_correct
from catengine.widgets.display import escape, html_table, new_figure, show_figure

THETA_LABEL = "ability θ (population SD units)"

#: table column header and distribution panel (title, axis label) of each item parameter beyond a, b
_PARAMETER_COLUMNS = {"c": "c", "d": "d", "omega": "ω", "phi": "φ", "lam": "λ"}
_PARAMETER_PANELS = {
    "c": ("Lower asymptote", "c (probability)"),
    "d": ("Upper asymptote", "d (probability)"),
    "omega": ("CoT intensity", "ω (log tokens)"),
    "phi": ("Speed sensitivity", "φ (log tokens per τ unit)"),
    "lam": ("CoT residual SD", "λ (log tokens)"),
}

_SORT_LABELS = {
    "difficulty": "difficulty -b/a",
    "discrimination": "discrimination a",
    "information": "information at θ",
    "expected_information": "posterior-expected information at θ",
    "b_sd": "posterior SD of b",
    "omega": "CoT intensity ω",
    "cot_information": "CoT information φ²/λ²",
}


class BankExplorer(widgets.VBox):
    """Interactive view of an :class:`~catengine.ItemBank`.

    * an item table sorted by difficulty, discrimination or information at a chosen θ (and, where
      the bank has them, posterior SD of b, CoT intensity, CoT information), ``n_rows`` rows;
    * item characteristic and information curves of the selected items (posterior bands of
      P(correct) and the posterior-expected information when the bank stores ``b_sd``);
    * parameter distributions (for LaRT banks also ω, φ, λ and the ability-speed correlation ρ).

    State for tests and scripts: ``sort_key``, ``descending``, ``order`` (item indices in table
    order), ``table_header``, ``table_rows``, ``selected_items``, ``curve_figure``,
    ``distribution_figure``; controls ``sort_by``, ``descending_box``, ``theta_slider``,
    ``rows_slider``, ``item_select``, ``top_button``, ``clear_button``.
    """

    def __init__(self, bank, *, n_rows: int = 15, theta_range: tuple[float, float] = (-4.0, 4.0),
                 n_points: int = 161, selected=None, level: float = 0.95):
        if not hasattr(bank, "params") or not hasattr(bank, "item_ids"):
            raise TypeError(f"BankExplorer needs an ItemBank, got {type(bank).__name__}")
        lo, hi = (float(v) for v in theta_range)
        if not lo < hi:
            raise ValueError(f"theta_range must be (low, high) with low < high, got {theta_range!r}")
        if not 0.0 < level < 1.0:
            raise ValueError(f"level must lie in (0, 1), got {level!r}")
        self.bank = bank
        self.params = bank.params
        self.level = float(level)
        self.theta_grid = np.linspace(lo, hi, int(n_points))
        fields_ = set(bank.items.data_vars)
        self.b_sd = np.asarray(bank.item_metadata("b_sd"), dtype=float) if "b_sd" in fields_ else None
        self.metadata_fields = [
            name for name in sorted(fields_ - {"rho", "b_sd", *self.params.parameter_names})
            if bank.items[name].dtype.kind in "OUS" and bank.items[name].ndim == 1
        ][:2]
        self.difficulty = np.asarray(bank.difficulty(), dtype=float)

        sort_options = ["difficulty", "discrimination", "information"]
        if self._has_expected_information:
            sort_options.append("expected_information")
        if self.b_sd is not None:
            sort_options.append("b_sd")
        if self.params.model.has_cot:
            sort_options += ["omega", "cot_information"]
        n_items = self.params.n_items
        self.sort_by = widgets.Dropdown(options=[(_SORT_LABELS[k], k) for k in sort_options], value="information",
                                        description="sort by", style={"description_width": "initial"})
        self.descending_box = widgets.Checkbox(value=True, description="descending", indent=False)
        self.theta_slider = widgets.FloatSlider(value=0.0, min=max(lo, -3.0), max=min(hi, 3.0), step=0.1,
                                                description="θ", continuous_update=False, readout_format=".1f")
        self.rows_slider = widgets.IntSlider(value=min(int(n_rows), n_items), min=1, max=min(100, n_items),
                                             description="rows", continuous_update=False)
        self.item_select = widgets.SelectMultiple(options=[], rows=8, description="plot",
                                                  layout=widgets.Layout(width="18em"))
        self.top_button = widgets.Button(description="select top 3", tooltip="plot the first three rows of the table")
        self.clear_button = widgets.Button(description="clear selection")
        self.header = widgets.HTML(self._header_html())
        self.table = widgets.HTML()
        self.curves_out = widgets.Output()
        self.distributions_out = widgets.Output()

        self.sort_key = self.sort_by.value
        self.descending = True
        self.order = np.arange(n_items)
        self.table_header: list[str] = []
        self.table_rows: list[tuple] = []
        self.selected_items: tuple[str, ...] = ()
        self.curve_figure = None
        self.distribution_figure = None

        controls = widgets.HBox([self.sort_by, self.descending_box, self.theta_slider, self.rows_slider])
        picker = widgets.VBox([self.item_select, widgets.HBox([self.top_button, self.clear_button])])
        super().__init__([
            self.header,
            controls,
            widgets.HBox([self.table, picker]),
            self.curves_out,
            self.distributions_out,
        ])
        self.add_class("catengine-bank-explorer")

        self._refresh_table()
        initial = list(selected) if selected is not None else [self.bank.item_ids[j] for j in self.order[:3]]
        self._select(initial)
        self._draw_distributions()

        self.sort_by.observe(self._on_table_control, names="value")
        self.descending_box.observe(self._on_table_control, names="value")
        self.rows_slider.observe(self._on_table_control, names="value")
        self.theta_slider.observe(self._on_theta, names="value")
        self.item_select.observe(self._on_selection, names="value")
        self.top_button.on_click(self._on_top)
        self.clear_button.on_click(self._on_clear)

    # ------------------------------------------------------------------ library values
    @property
    def _has_expected_information(self) -> bool:
        return self.b_sd is not None and self.params.model.link == "logistic"  # expected_item_information's curves

    def _information(self, theta, items=None) -> np.ndarray:
        return np.asarray(fisher_information(self.params, theta, items), dtype=float)

    def _expected_information(self, theta, items=None) -> np.ndarray:
        from catengine.models.expected_information import expected_item_information

        return np.asarray(expected_item_information(self.params, self.b_sd, theta, items), dtype=float)

    def _sort_values(self, key: str) -> np.ndarray:
        theta = float(self.theta_slider.value)
        if key == "difficulty":
            return self.difficulty
        if key == "discrimination":
            return np.asarray(self.params.a, dtype=float)
        if key == "information":
            return self._information(theta)
        if key == "expected_information":
            return self._expected_information(theta)
        if key == "b_sd":
            return self.b_sd
        if key == "omega":
            return np.asarray(self.params.omega, dtype=float)
        if key == "cot_information":
            return np.asarray(self.params.model.cot_information(self.params), dtype=float)
        raise ValueError(f"unknown sort key {key!r}; allowed: {', '.join(_SORT_LABELS)}")

    # ------------------------------------------------------------------ rendering
    def _header_html(self) -> str:
        b = self.bank
        parts = [
            f"<b>{escape(b.bank_id)}</b> v{b.version}" if b.version else f"<b>{escape(b.bank_id)}</b> (unsaved)",
            f"response model <code>{escape(b.response_model)}</code> ({escape(self.params.model.label)})",
            f"{b.n_items} items",
            f"calibration: {escape(b.attrs.get('calibration_method') or 'n/a')}",
        ]
        if self.params.model.has_cot:
            parts.append(f"ρ(ability, speed) = {self.params.rho:+.3f}")
        if self.b_sd is not None:
            parts.append("posterior of b: yes (b_sd)")
        n_flat = int(np.sum(np.asarray(self.params.a) == 0))
        if n_flat:
            parts.append(f"{n_flat} non-discriminating item(s) (a = 0, difficulty undefined)")
        return " · ".join(parts)

    def _refresh_table(self) -> None:
        key = self.sort_by.value
        desc = bool(self.descending_box.value)
        values = self._sort_values(key)
        # NaN (undefined difficulty) sorts last in either direction; ties keep bank order
        finite = ~np.isnan(values)
        keyed = np.where(finite, -values if desc else values, np.inf)
        order = np.lexsort((np.arange(values.size), keyed))
        self.sort_key, self.descending, self.order = key, desc, order
        theta = float(self.theta_slider.value)
        info = self._information(theta)
        header = ["#", "item", "a", "b", "difficulty", f"info(θ={theta:.1f})"]
        columns = [np.asarray(self.params.a), np.asarray(self.params.b), self.difficulty, info]
        if self._has_expected_information:
            header.append(f"E-info(θ={theta:.1f})")
            columns.append(self._expected_information(theta))
        if self.b_sd is not None:
            header.append("b_sd")
            columns.append(self.b_sd)
        extra = self.params.parameter_names[2:]  # the model's parameters beyond a, b
        header += [_PARAMETER_COLUMNS[name] for name in extra]
        columns += [np.asarray(getattr(self.params, name)) for name in extra]
        meta = [np.asarray(self.bank.item_metadata(f)) for f in self.metadata_fields]
        header += self.metadata_fields
        n = int(self.rows_slider.value)
        ids = self.bank.item_ids
        rows = []
        for rank, j in enumerate(order[:n], start=1):
            rows.append((rank, ids[j], *(float(col[j]) for col in columns), *(str(m[j]) for m in meta)))
        self.table_header, self.table_rows = header, rows
        self.table.value = (
            f"<div><b>items sorted by {escape(_SORT_LABELS[key])}</b> ({'descending' if desc else 'ascending'}; "
            f"first {len(rows)} of {len(ids)})</div>" + html_table(header, rows)
        )
        shown = [r[1] for r in rows]
        keep = [i for i in self.item_select.value if i in shown]
        options = shown + [i for i in self.selected_items if i not in shown]
        self._updating = True
        try:
            self.item_select.options = options
            self.item_select.value = tuple(i for i in self.selected_items if i in options) or tuple(keep)
        finally:
            self._updating = False

    def _select(self, item_ids) -> None:
        ids = [str(i) for i in item_ids]
        for i in ids:
            self.bank.index_of(i)  # KeyError naming the id
        options = list(self.item_select.options) + [i for i in ids if i not in self.item_select.options]
        self._updating = True
        try:
            self.item_select.options = options
            self.item_select.value = tuple(ids)
        finally:
            self._updating = False
        self.selected_items = tuple(ids)
        self._draw_curves()

    def select(self, item_ids) -> None:
        """Plot the curves of these items (ids of the bank)."""
        self._select(item_ids)

    def _band_params(self, idx: np.ndarray, z: float):
        """Item parameters of ``idx`` with b at its posterior quantiles (P is monotone in b)."""
        sub = self.params.subset(idx)
        sd = self.b_sd[idx]
        return dataclasses.replace(sub, b=sub.b - z * sd), dataclasses.replace(sub, b=sub.b + z * sd)

    def _draw_curves(self) -> None:
        ids = self.selected_items
        theta = self.theta_grid
        cot_bank = self.params.model.has_cot
        fig, (ax_p, ax_i) = new_figure(2)
        if not ids:
            for ax in (ax_p, ax_i):
                ax.text(0.5, 0.5, "no item selected", ha="center", va="center", transform=ax.transAxes)
        else:
            idx = np.array([self.bank.index_of(i) for i in ids], dtype=np.int64)
            p = np.asarray(prob_correct(self.params, theta, idx))
            info = self._information(theta, idx)
            e_info = self._expected_information(theta, idx) if self._has_expected_information else None
            bands = None
            if self.b_sd is not None:
                z = NormalDist().inv_cdf(0.5 + self.level / 2.0)
                lo_p, hi_p = self._band_params(idx, z)
                bands = (np.asarray(prob_correct(lo_p, theta)), np.asarray(prob_correct(hi_p, theta)))
            for k, item in enumerate(ids):
                (line,) = ax_p.plot(theta, p[:, k], label=item)
                if bands is not None:
                    ax_p.fill_between(theta, bands[0][:, k], bands[1][:, k], color=line.get_color(), alpha=0.2, lw=0)
                ax_i.plot(theta, info[:, k], color=line.get_color(), label=f"{item} (point)")
                if e_info is not None:
                    ax_i.plot(theta, e_info[:, k], color=line.get_color(), ls="--", label=f"{item} (posterior-expected)")
            ax_p.legend(fontsize="small", loc="best")
            ax_i.legend(fontsize="small", loc="best")
        t0 = float(self.theta_slider.value)
        for ax in (ax_p, ax_i):
            ax.axvline(t0, color="0.6", lw=0.8, ls=":")
            ax.set_xlabel(THETA_LABEL)
        band_note = f" ({int(round(self.level * 100))}% posterior band of b)" if self.b_sd is not None else ""
        ax_p.set_title("Item characteristic curves" + band_note)
        ax_p.set_ylabel("P(correct) (probability)")
        ax_p.set_ylim(-0.02, 1.02)
        ax_i.set_title("Item information about θ" + (" (accuracy part)" if cot_bank else ""))
        ax_i.set_ylabel("Fisher information (1 / θ-unit²)")
        self.curve_figure = fig
        show_figure(self.curves_out, fig)

    def _draw_distributions(self) -> None:
        p = self.params
        panels = [
            (np.asarray(p.a), "Discrimination", "a (per θ unit)"),
            (self.difficulty, "Difficulty", "difficulty -b/a (θ units)"),
        ]
        model = p.model
        extra = {name: (np.asarray(getattr(p, name)), *_PARAMETER_PANELS[name]) for name in p.parameter_names[2:]}
        panels += [extra.pop(name) for name in ("c", "d") if name in extra]  # the accuracy curve's, before b_sd
        if self.b_sd is not None:
            panels.append((self.b_sd, "Posterior SD of the intercept", "b_sd (logit units)"))
        panels += list(extra.values())  # the CoT part's
        if model.has_cot:
            panels.append((np.asarray(model.cot_information(p)), "CoT information about speed τ", "φ²/λ² (1 / τ-unit²)"))
        subjects = self.bank.subjects if model.has_cot else None
        scatter = subjects is not None and "theta" in subjects and "tau" in subjects
        ncols = 3
        nrows = -(-(len(panels) + int(scatter)) // ncols)
        from matplotlib.figure import Figure

        fig = Figure(figsize=(4.2 * ncols, 2.9 * nrows), layout="constrained")
        if scatter:
            ax = fig.add_subplot(nrows, ncols, len(panels) + 1)
            ax.scatter(subjects["theta"].values, subjects["tau"].values, s=10, alpha=0.7, color="C1")
            ax.set_title(f"Calibration LLMs: ability vs speed (ρ = {p.rho:+.2f})")
            ax.set_xlabel("ability θ (population SD units)")
            ax.set_ylabel("speed τ (population SD units)")
        for k, (values, title, xlabel) in enumerate(panels):
            ax = fig.add_subplot(nrows, ncols, k + 1)
            finite = values[np.isfinite(values)]
            ax.hist(finite, bins=min(30, max(5, finite.size // 5)), color="C0", alpha=0.8)
            missing = values.size - finite.size
            ax.set_title(title + (f" ({missing} undefined)" if missing else ""))
            ax.set_xlabel(xlabel)
            ax.set_ylabel("count (items)")
        sup = f"Parameter distributions of {self.bank.bank_id} ({p.n_items} items)"
        if model.has_cot:
            sup += f"; ρ(ability θ, speed τ) = {p.rho:+.3f}"
        fig.suptitle(sup)
        self.distribution_figure = fig
        show_figure(self.distributions_out, fig, dpi=70)

    # ------------------------------------------------------------------ events
    def _on_table_control(self, _change=None) -> None:
        self._refresh_table()

    def _on_theta(self, _change=None) -> None:
        self._refresh_table()
        self._draw_curves()

    def _on_selection(self, change) -> None:
        if getattr(self, "_updating", False):
            return
        self.selected_items = tuple(change["new"])
        self._draw_curves()

    def _on_top(self, _button=None) -> None:
        self._select([self.bank.item_ids[j] for j in self.order[:3]])

    def _on_clear(self, _button=None) -> None:
        self._select([])


__all__ = ["BankExplorer", "THETA_LABEL"]
