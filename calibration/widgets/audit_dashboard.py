"""``AuditDashboard``: run a small recovery audit (``calibration.audit``) and show its plots.

The dashboard collects the settings (bank, sample sizes, ability shape, methods, replications),
calls ``calibration.audit.recovery_audit`` (progress bar from the audit's own tqdm, captured in the
dashboard), and shows ``calibration.audit.summarize`` (means with Monte-Carlo SEs) as plots and
``calibration.audit.summary_table`` as a table. It computes no metric itself.

It lives in ``calibration.widgets`` because it drives the offline audits; it shows them with the
engine's display helpers (``catengine.widgets.display``), so the imports point one way.
"""

from __future__ import annotations

from importlib import import_module

import ipywidgets as widgets
import numpy as np

from catengine.widgets.display import escape, html_table, show_figure, show_text

ABILITY_SHAPES = {
    "normal": "normal",
    "right-skewed (skew-normal, α = 8)": "skew-normal:skew=8",
    "left-skewed (skew-normal, α = -8)": "skew-normal:skew=-8",
    "bimodal (separation 4 SD)": "bimodal:separation=4",
    "heavy-tailed (Student t, 3 df)": "student-t:df=3",
}
BANK_SUBJECTS = "resampled from the bank's calibration LLMs"

# metric -> (panel title, y label with unit); the audit defines the metrics (calibration.audit)
PANELS = {
    "kendall_tau": ("Ranking recovery", "Kendall τ(θ, θ̂) (rank correlation, unitless)"),
    "pearson_difficulty": ("Difficulty recovery", "Pearson r(−b/a, −b̂/â) (unitless)"),
    "pearson_a": ("Discrimination recovery", "Pearson r(a, â) (unitless)"),
    "rmse_theta": ("Ability error", "RMSE of θ̂ (population SD units)"),
    "aggregate_score_error": ("Score error", "aggregate score error (probability)"),
    "runtime_s": ("Fit runtime", "seconds per fit (s)"),
}
SAMPLE_SIZES = (30, 50, 100, 200, 400)


class AuditDashboard(widgets.VBox):
    """Choose a bank, sample sizes, ability shape and methods; run a small recovery audit.

    ``banks``: an ItemBank, or a mapping name -> ItemBank (or path). ``audit_module``: the module
    providing ``recovery_audit``, ``summarize``, ``summary_table`` and ``METHODS`` (default
    ``calibration.audit``). ``method_options``: passed to ``recovery_audit`` (e.g. shorter SAEM
    runs: ``{"saem": {"max_iter": 40, "n_burnin": 10}}``).

    State for tests and scripts: ``result`` (the audit Dataset), ``summary`` (its summarize()),
    ``table_header`` / ``table_rows``, ``figure``, ``status_text``, ``last_error``, ``run_count``;
    controls ``bank_select``, ``sizes_select``, ``ability_select``, ``methods_select``,
    ``replications_slider``, ``workers_slider``, ``seed_input``, ``run_button``.
    """

    def __init__(self, banks, *, audit_module="calibration.audit", method_options: dict | None = None,
                 sample_sizes=SAMPLE_SIZES, default_sizes=(30, 100), replications: int = 2, n_workers: int = 1,
                 seed: int = 0):
        if hasattr(banks, "params") and hasattr(banks, "bank_id"):
            banks = {banks.bank_id: banks}
        if not isinstance(banks, dict) or not banks:
            raise TypeError(f"banks must be an ItemBank or a non-empty mapping name -> ItemBank, got {type(banks).__name__}")
        self.audit = import_module(audit_module) if isinstance(audit_module, str) else audit_module
        for name in ("recovery_audit", "summarize", "summary_table", "METHODS"):
            if not hasattr(self.audit, name):
                raise TypeError(f"audit module {getattr(self.audit, '__name__', self.audit)!r} has no {name!r}")
        self.banks = {str(k): v for k, v in banks.items()}
        needs_cot = getattr(self.audit, "NEEDS_COT", None)
        if needs_cot is None:  # calibration.audit keeps it in its methods module
            from calibration.audit.methods import NEEDS_COT as needs_cot
        self._needs_cot = set(needs_cot)
        self.method_options = dict(method_options or {})
        self.result = None
        self.summary = None
        self.table_header: list[str] = []
        self.table_rows: list[tuple] = []
        self.figure = None
        self.status_text = ""
        self.last_error: str | None = None
        self.run_count = 0

        sizes = sorted({int(n) for n in sample_sizes} | {int(n) for n in default_sizes})
        self.bank_select = widgets.Dropdown(options=list(self.banks), description="bank")
        self.sizes_select = widgets.SelectMultiple(options=sizes, value=tuple(int(n) for n in default_sizes),
                                                   rows=min(6, len(sizes)), description="LLMs (N)")
        self.ability_select = widgets.Dropdown(description="abilities", style={"description_width": "initial"})
        self.methods_select = widgets.SelectMultiple(rows=4, description="methods")
        self.replications_slider = widgets.IntSlider(value=int(replications), min=1, max=20, description="replications",
                                                     style={"description_width": "initial"})
        self.workers_slider = widgets.IntSlider(value=int(n_workers), min=1, max=2, description="workers")
        self.seed_input = widgets.IntText(value=int(seed), description="seed", layout=widgets.Layout(width="12em"))
        self.run_button = widgets.Button(description="run audit", button_style="primary", icon="play")
        self.run_button.add_class("catengine-run-audit")
        self.status = widgets.HTML()
        self.progress_out = widgets.Output()
        self.plots_out = widgets.Output()
        self.table = widgets.HTML()

        left = widgets.VBox([self.bank_select, self.ability_select, self.replications_slider, self.workers_slider,
                             self.seed_input])
        super().__init__([
            widgets.HTML("<h4 style='margin:2px 0'>Recovery audit: simulate from a bank, refit, compare</h4>"),
            widgets.HBox([left, self.sizes_select, self.methods_select]),
            widgets.HBox([self.run_button, self.status]),
            self.progress_out,
            self.plots_out,
            self.table,
        ])
        self.add_class("catengine-audit-dashboard")
        self._on_bank()
        self.bank_select.observe(self._on_bank, names="value")
        self.run_button.on_click(lambda _b: self.run())
        show_text(self.plots_out, "press 'run audit' to simulate, refit and compare")

    # ------------------------------------------------------------------ options
    @property
    def bank(self):
        return self.banks[self.bank_select.value]

    def _on_bank(self, _change=None) -> None:
        bank = self.bank
        needs_cot = self._needs_cot
        params = getattr(bank, "params", None)
        has_cot = params is not None and params.model.has_cot  # simulated data carry CoT lengths
        methods = [m for m in self.audit.METHODS if has_cot or m not in needs_cot]
        self.methods_select.options = methods
        self.methods_select.value = tuple(methods[:1])
        shapes = dict(ABILITY_SHAPES)
        subjects = getattr(bank, "subjects", None)
        if subjects is not None and "theta" in subjects:
            shapes[BANK_SUBJECTS] = "bank"
        self.ability_select.options = list(shapes.items())
        self.ability_select.value = "normal"

    def settings(self) -> dict:
        """The keyword arguments the next run passes to ``recovery_audit``."""
        methods = tuple(self.methods_select.value)
        options = {m: o for m, o in self.method_options.items() if m in methods}
        return {
            "n_subjects": tuple(sorted(self.sizes_select.value)),
            "ability": self.ability_select.value,
            "method": methods,
            "replications": int(self.replications_slider.value),
            "rng": int(self.seed_input.value),
            "n_workers": int(self.workers_slider.value),
            "method_options": options or None,
        }

    # ------------------------------------------------------------------ running
    def _set_status(self, text: str, error: bool = False) -> None:
        self.status_text = text
        color = "#b00" if error else "inherit"
        self.status.value = f"<span style='color:{color}'>{escape(text)}</span>"

    def run(self):
        """Run the audit with the current settings; returns the result Dataset (or None on error)."""
        self.last_error = None
        kw = self.settings()
        if not kw["n_subjects"] or not kw["method"]:
            self.last_error = "choose at least one sample size and one method"
            self._set_status(self.last_error, error=True)
            return None
        self.run_button.disabled = True
        self._set_status(f"running: {len(kw['method'])} method(s) × {len(kw['n_subjects'])} sample size(s) × "
                         f"{kw['replications']} replication(s) ...")
        self.progress_out.outputs = ()
        try:
            with self.progress_out:  # the audit's tqdm bar (a widget in a kernel, text elsewhere)
                result = self.audit.recovery_audit(self.bank, progress=True, **kw)
            summary = self.audit.summarize(result)
            table = self.audit.summary_table(result)
        except Exception as exc:  # noqa: BLE001 - shown to the user, the dashboard stays usable
            self.last_error = f"{type(exc).__name__}: {exc}"
            self._set_status(self.last_error, error=True)
            return None
        finally:
            self.run_button.disabled = False
        self.result, self.summary = result, summary
        self.run_count += 1
        self.table_header = [str(c) for c in table.columns]
        self.table_rows = [tuple(row) for row in table.itertuples(index=False)]
        self.table.value = "<b>summary: mean ± Monte-Carlo SE over replications</b>" + html_table(
            self.table_header, self.table_rows, max_height=None)
        failed = float(np.nanmean(result["failed"].values)) if "failed" in result else 0.0
        errors = sorted({str(e) for e in np.asarray(result["error"].values).ravel() if str(e)}) if "error" in result else []
        text = f"done: {int(result.sizes.get('replication', 0))} replication(s) of {self.bank.bank_id!r}"
        if failed > 0:
            text += f"; {failed:.0%} of the fits failed ({errors[0] if errors else 'see the table'})"
        self._set_status(text, error=failed > 0)
        self._draw(summary, kw)
        return result

    def _draw(self, summary, kw) -> None:
        metrics = [m for m in PANELS if m in summary.data_vars]
        ncols = 3
        nrows = -(-len(metrics) // ncols)
        from matplotlib.figure import Figure

        fig = Figure(figsize=(4.6 * ncols, 3.3 * nrows + 0.5), layout="constrained")
        sizes = np.asarray(summary["n_subjects"].values, dtype=float)
        for k, metric in enumerate(metrics):
            ax = fig.add_subplot(nrows, ncols, k + 1)
            var = summary[metric]
            for method in summary["method"].values:
                for ability in summary["ability"].values:
                    cell = var.sel({"method": method, "ability": ability})  # dict: sel() has its own method=
                    mean = np.asarray(cell.sel(statistic="mean").values, dtype=float)
                    mcse = np.asarray(cell.sel(statistic="mcse").values, dtype=float)
                    label = str(method) if summary.sizes["ability"] == 1 else f"{method}, {ability}"
                    ax.errorbar(sizes, mean, yerr=2 * np.nan_to_num(mcse), marker="o", capsize=3, label=label)
            title, ylabel = PANELS[metric]
            ax.set_title(title)
            ax.set_xlabel("calibration sample size N (LLMs)")
            ax.set_ylabel(ylabel)
            ax.set_xscale("log")
            ax.set_xticks(sizes, [str(int(n)) for n in sizes])
            ax.grid(alpha=0.3)
            if k == 0:
                ax.legend(fontsize="small")
        fig.suptitle(f"Recovery audit of {self.bank.bank_id!r} ({kw['ability']} abilities; "
                     f"{kw['replications']} replication(s); error bars ±2 Monte-Carlo SE)")
        self.figure = fig
        show_figure(self.plots_out, fig)


__all__ = ["ABILITY_SHAPES", "AuditDashboard", "PANELS"]
