"""Widget tests: build each widget on a tiny bank / session, click its buttons, check what it shows.

The widgets keep their displayed state on attributes (table rows, labels, matplotlib figures) and
in their ipywidgets models (HTML values, Output ``outputs``), so these tests read both. No kernel
is needed: outside one, ipywidgets uses a dummy comm.
"""

from __future__ import annotations

import importlib.util
import warnings

import re

import numpy as np
import pytest

pytest.importorskip("ipywidgets")
xr = pytest.importorskip("xarray")

from catengine import ItemBank  # noqa: E402
from catengine.models import fisher_information, prob_correct  # noqa: E402


def _png(output) -> str:
    (entry,) = output.outputs
    assert entry["output_type"] == "display_data"
    return entry["data"]["image/png"]


def _line_data(ax):
    """y-data of the curves of an axes (the dotted θ marker excluded)."""
    return [np.asarray(line.get_ydata(), dtype=float) for line in ax.lines if line.get_linestyle() != ":"]


def _assert_labelled(fig):
    for ax in fig.axes:
        assert ax.get_title(), "every panel has a title"
        assert ax.get_xlabel() and ax.get_ylabel(), f"panel {ax.get_title()!r} lacks axis labels"
        assert "(" in ax.get_xlabel() and "(" in ax.get_ylabel(), f"panel {ax.get_title()!r}: labels state units"


# ---------------------------------------------------------------------------- tiny banks
@pytest.fixture(scope="module")
def lart_bank():
    rng = np.random.default_rng(0)
    J = 12
    subjects = xr.Dataset(
        {
            "theta": ("subject", np.array([-1.5, -0.2, 0.4, 1.8])),
            "theta_sd": ("subject", np.array([0.2, 0.3, 0.25, 0.2])),
            "tau": ("subject", np.array([0.5, 0.1, -0.2, -0.9])),
            "tau_sd": ("subject", np.full(4, 0.1)),
        },
        coords={"subject": ("subject", np.array(["llm-a", "llm-b", "llm-c", "llm-d"], dtype=object))},
    )
    return ItemBank.from_params(
        "lart", [f"q{j:02d}" for j in range(J)], bank_id="tiny_lart",
        a=rng.uniform(0.5, 2.0, J), b=rng.normal(0, 1, J), omega=rng.normal(6.0, 0.3, J),
        phi=rng.uniform(1.0, 2.0, J), lam=rng.uniform(0.8, 1.2, J), rho=-0.5,
        item_metadata={"benchmark": ["tiny"] * J}, subjects=subjects,
    )


@pytest.fixture(scope="module")
def twopl_bank():
    rng = np.random.default_rng(1)
    J = 10
    a = rng.uniform(0.5, 2.0, J)
    a[3] = 0.0  # a non-discriminating item: difficulty undefined, must sort last and not crash
    return ItemBank.from_params(
        "2pl", [f"i{j}" for j in range(J)], bank_id="tiny_2pl", a=a, b=rng.normal(0, 1, J),
        b_sd=rng.uniform(0.1, 0.6, J),
    )


@pytest.fixture(scope="module")
def fourpl_bank():
    rng = np.random.default_rng(2)
    J = 8
    return ItemBank.from_params(
        "4pl", [f"k{j}" for j in range(J)], bank_id="tiny_4pl", a=rng.uniform(0.5, 2.0, J), b=rng.normal(0, 1, J),
        c=rng.uniform(0.0, 0.2, J), d=rng.uniform(0.85, 1.0, J),
    )


# ---------------------------------------------------------------------------- BankExplorer
def test_bank_explorer_table_sorts_and_follows_controls(twopl_bank):
    from catengine.widgets import BankExplorer

    ex = BankExplorer(twopl_bank, n_rows=10)
    assert ex.sort_key == "information" and len(ex.table_rows) == 10
    assert ex.table.value.count("<tr>") == 11  # header + 10 rows
    info = fisher_information(twopl_bank.params, 0.0)
    shown = [row[ex.table_header.index("info(θ=0.0)")] for row in ex.table_rows]
    assert shown == sorted(shown, reverse=True)
    assert np.allclose(sorted(shown, reverse=True), np.sort(info)[::-1])

    ex.sort_by.value = "difficulty"
    diff_col = ex.table_header.index("difficulty")
    ids = [row[1] for row in ex.table_rows]
    assert ids[-1] == "i3", "the undefined difficulty (a = 0) sorts last"
    diffs = [row[diff_col] for row in ex.table_rows[:-1]]
    assert diffs == sorted(diffs, reverse=True)
    np.testing.assert_allclose(diffs, np.sort(np.delete(twopl_bank.difficulty(), 3))[::-1])

    ex.descending_box.value = False
    diffs_up = [row[diff_col] for row in ex.table_rows[:-1]]
    assert diffs_up == sorted(diffs_up)

    ex.rows_slider.value = 4
    assert len(ex.table_rows) == 4 and ex.table.value.count("<tr>") == 5

    ex.sort_by.value = "information"
    ex.theta_slider.value = 2.0
    assert "info(θ=2.0)" in ex.table_header
    col = ex.table_header.index("info(θ=2.0)")
    np.testing.assert_allclose([r[col] for r in ex.table_rows], np.sort(fisher_information(twopl_bank.params, 2.0))[:4])


def test_bank_explorer_buttons_change_curves(twopl_bank):
    from catengine.widgets import BankExplorer

    ex = BankExplorer(twopl_bank, n_rows=6)
    assert len(ex.selected_items) == 3
    before = _png(ex.curves_out)
    ex.clear_button.click()
    assert ex.selected_items == ()
    assert _line_data(ex.curve_figure.axes[0]) == []
    assert _png(ex.curves_out) != before

    ex.sort_by.value = "discrimination"
    ex.top_button.click()
    top3 = tuple(row[1] for row in ex.table_rows[:3])
    assert ex.selected_items == top3
    idx = [twopl_bank.index_of(i) for i in top3]
    p_lines = _line_data(ex.curve_figure.axes[0])
    expected = prob_correct(twopl_bank.params, ex.theta_grid, idx)
    for k in range(3):
        np.testing.assert_allclose(p_lines[k], expected[:, k])
    # information panel: point (solid) and posterior-expected (dashed) per item, from the library
    info_lines = _line_data(ex.curve_figure.axes[1])
    assert len(info_lines) == 6
    np.testing.assert_allclose(info_lines[0], fisher_information(twopl_bank.params, ex.theta_grid, idx)[:, 0])
    # posterior band of P(correct): one filled band per item, containing the curve
    bands = ex.curve_figure.axes[0].collections
    assert len(bands) == 3
    _assert_labelled(ex.curve_figure)

    ex.item_select.value = ("i0",)
    assert ex.selected_items == ("i0",) and len(_line_data(ex.curve_figure.axes[0])) == 1


def test_bank_explorer_lart_shows_cot_parameters_and_rho(lart_bank):
    from catengine.widgets import BankExplorer

    ex = BankExplorer(lart_bank)
    assert "ρ(ability, speed) = -0.500" in ex.header.value
    assert {"ω", "φ", "λ", "benchmark"} <= set(ex.table_header)
    titles = [ax.get_title() for ax in ex.distribution_figure.axes]
    assert "CoT intensity" in titles and any("ability vs speed" in t for t in titles)
    assert "-0.500" in ex.distribution_figure.get_suptitle()
    _assert_labelled(ex.distribution_figure)
    ex.sort_by.value = "omega"
    col = ex.table_header.index("ω")
    assert [r[col] for r in ex.table_rows] == sorted((r[col] for r in ex.table_rows), reverse=True)
    assert ex.distributions_out.outputs and ex.curves_out.outputs


def test_bank_explorer_4pl_and_bad_input(fourpl_bank):
    from catengine.widgets import BankExplorer

    ex = BankExplorer(fourpl_bank, selected=["k1"])
    assert ex.selected_items == ("k1",)
    assert {"c", "d"} <= set(ex.table_header)
    _assert_labelled(ex.curve_figure)
    with pytest.raises(KeyError, match="nope"):
        ex.select(["nope"])
    with pytest.raises(TypeError, match="ItemBank"):
        BankExplorer(object())


# ---------------------------------------------------------------------------- SessionPanel
def _session(bank, **kw):
    from catengine.session import CATSession

    return CATSession(bank, rng=3, **kw)


def test_session_panel_answer_buttons_update_display(lart_bank):
    from catengine.widgets import SessionPanel

    from catengine.selection import DoublyRobustSelection

    # half the steps adaptive and no opening design draws: the first step is the adaptive rule's, whose
    # criterion the panel explains
    s = _session(lart_bank, selector=DoublyRobustSelection(share=0.5, opening=0))
    panel = SessionPanel(s)
    assert panel.n_items == 0 and panel.next_item_id in lart_bank.item_ids
    assert "items administered: <span class='catengine-count-value'>0</span>" in panel.count_label.value
    assert panel.step_button.disabled and panel.play_button.disabled  # no responder
    # the next item and why: the session's proposal and its criterion value
    assert panel.next_item_id == s.pending_item
    assert panel.next_criterion == pytest.approx(s.pending_criterion)
    # the criterion in words and with its natural sign: the SD of theta the item leads to
    assert "SD(θ) after this item ≈" in panel.next_html.value and "(ThetaTargetedInformation)" in panel.next_html.value
    assert f"{np.sqrt(-s.pending_criterion):.4f}" in panel.next_html.value and "-0." not in panel.next_html.value
    first = panel.next_item_id
    panel.cot_input.value = "812"
    panel.correct_button.click()
    assert panel.n_items == 1 and s.n_items == 1
    assert panel.sequence_rows[0][:4] == (1, first, 1, 812.0)
    assert "<span class='catengine-count-value'>1</span>" in panel.count_label.value
    assert panel.next_item_id != first
    panel.cot_input.value = ""
    panel.incorrect_button.click()
    assert panel.n_items == 2 and panel.sequence_rows[1][2] == 0 and panel.sequence_rows[1][3] is None
    assert panel.sequence_html.value.count("<tr>") == 3
    # the trajectory shows the session's estimates and their 95% intervals (TraitEstimate.interval)
    ax = panel.trajectory_figure.axes[0]
    (theta_line,) = [ln for ln in ax.lines if ln.get_label() == "estimate of θ"]
    np.testing.assert_allclose(theta_line.get_ydata(), [r.theta for r in s.history])
    band = ax.collections[0].get_paths()[0].vertices[:, 1]
    assert band.max() == pytest.approx(max(r.theta + 1.959963984540054 * r.theta_sd for r in s.history))
    _assert_labelled(panel.trajectory_figure)
    assert f"θ = {s.estimate.theta:+.3f}" in panel.status.value

    # bad input: shown, session unchanged
    panel.cot_input.value = "lots"
    panel.correct_button.click()
    assert panel.n_items == 2 and "CoT tokens must be a number" in panel.last_error
    panel.cot_input.value = "-5"
    panel.correct_button.click()
    assert panel.n_items == 2 and panel.last_error and "InvalidResponseError" in panel.last_error


def test_session_panel_ranking_uses_bank_subjects(lart_bank):
    from catengine.stopping import RivalOrderDecided
    from catengine.widgets import SessionPanel

    s = _session(lart_bank)
    panel = SessionPanel(s)
    names = [r[1] for r in panel.ranking_rows]
    assert names == ["llm-d", "llm-c", f"{s.subject} (under test)", "llm-b", "llm-a"]  # prior mean 0
    for _ in range(3):
        panel.correct_button.click()
    rivals = RivalOrderDecided.from_bank(lart_bank, ["llm-a", "llm-b", "llm-c", "llm-d"])
    expected = rivals.probabilities(s.estimate)
    shown = {r[1]: r[4] for r in panel.ranking_rows if r[0] != "→"}
    assert shown == pytest.approx(expected)
    position = [r[0] for r in panel.ranking_rows].index("→")
    assert position == sum(t > s.estimate.theta for t in (-1.5, -0.2, 0.4, 1.8))
    assert position < 2, "three correct answers move the subject above llm-b"
    assert panel.ranking_html.value.count("<tr>") == 6
    # how P(ahead) is computed is said, and tiny tails are shown as bounds, not as 1.51e-10
    assert "Φ((θ_" in panel.ranking_message and "reported SD" in panel.ranking_message
    assert not re.search(r"\de-\d", panel.ranking_html.value)


def test_format_probability_bounds_the_tails():
    from catengine.widgets.session_panel import format_probability

    assert format_probability(1.51e-10) == "< 0.001" and format_probability(1 - 1e-9) == "> 0.999"
    assert format_probability(0.4567) == "0.457" and format_probability(float("nan")) == "–"


def test_trajectory_axis_counts_whole_items(lart_bank):
    from catengine.widgets import SessionPanel

    panel = SessionPanel(_session(lart_bank))
    panel.correct_button.click()
    ax = panel.trajectory_figure.axes[0]
    ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
    assert ticks and all(float(t).is_integer() for t in ticks) and 1 in ticks
    assert ax.get_xlim()[0] <= 0.5 and ax.get_xlim()[1] >= 2.5


def test_session_panel_step_and_play_with_simulated_llm(lart_bank):
    from catengine.stopping import MaxItems
    from catengine.widgets import SessionPanel
    from catengine.widgets.session_panel import SimulatedLLM

    llm = SimulatedLLM(lart_bank, theta=0.7, tau=-0.3, rng=5)
    s = _session(lart_bank, stopping=MaxItems(6))
    panel = SessionPanel(s, llm)
    assert "true θ = +0.70" in panel.title_html.value
    png0 = _png(panel.trajectory_out)
    panel.step_button.click()
    assert panel.n_items == 1 and panel.sequence_rows[0][3] is not None  # a simulated CoT length
    assert _png(panel.trajectory_out) != png0
    true_line = [ln for ln in panel.trajectory_figure.axes[0].lines if "true" in ln.get_label()]
    assert true_line and true_line[0].get_ydata()[0] == pytest.approx(0.7)
    panel.play_button.click()
    assert panel.n_items == 6 and s.finished
    assert panel.step_button.disabled and panel.play_button.disabled
    assert "finished" in panel.status_text
    assert panel.step() is False and panel.n_items == 6


def test_session_panel_replayed_llm_on_logistic_bank(twopl_bank):
    from catengine.stopping import MaxItems
    from catengine.widgets import SessionPanel
    from catengine.widgets.session_panel import ReplayedLLM

    correct = np.array([1, 0, 1, 1, -1, 0, 1, 0, 1, 1])  # item i4 has no answer
    llm = ReplayedLLM(twopl_bank.item_ids, correct, label="replayed test LLM")
    s = _session(twopl_bank, stopping=MaxItems(10))
    panel = SessionPanel(s, llm, reference_theta=0.25)
    assert panel.cot_input.layout.display == "none"  # no CoT box for logistic banks
    assert "no calibration LLMs" in panel.ranking_message
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        n = panel.play()
    # the item without an answer is excluded from the session, every other one is replayed exactly
    assert panel.excluded == ["i4"] and panel.last_error is None
    answered = {r[1]: r[2] for r in panel.sequence_rows}
    assert n == 9 == len(answered) and "i4" not in answered
    assert all(answered[i] == correct[twopl_bank.index_of(i)] for i in answered)
    assert s.finished and "finished" in panel.status_text
    ref = [ln for ln in panel.trajectory_figure.axes[0].lines if ln.get_label() == "reference θ"]
    assert ref and ref[0].get_ydata()[0] == pytest.approx(0.25)


def test_session_panel_mapping_responder_and_errors(twopl_bank):
    from catengine.widgets import SessionPanel

    with pytest.raises(TypeError, match="CATSession"):
        SessionPanel(object())
    with pytest.raises(TypeError, match="responder"):
        SessionPanel(_session(twopl_bank), responder=42)
    s = _session(twopl_bank)
    panel = SessionPanel(s, responder={i: 1 for i in twopl_bank.item_ids})
    panel.step_button.click()
    assert panel.n_items == 1 and panel.sequence_rows[0][2] == 1


# ---------------------------------------------------------------------------- AuditDashboard
_HAS_AUDIT = importlib.util.find_spec("calibration.audit") is not None


@pytest.mark.skipif(not _HAS_AUDIT, reason="calibration.audit (issue 7) does not exist yet; AuditDashboard needs it")
def test_audit_dashboard_runs_a_tiny_audit(twopl_bank, lart_bank):
    from calibration.audit import summarize
    from calibration.widgets import AuditDashboard

    dash = AuditDashboard({"tiny_2pl": twopl_bank, "tiny_lart": lart_bank}, replications=2)
    assert dash.result is None and dash.figure is None
    assert "saem" not in dash.methods_select.options  # SAEM needs CoT lengths: LaRT banks only
    assert dash.methods_select.value == ("cbmm",)
    dash.sizes_select.value = (30, 50)
    dash.run_button.click()
    assert dash.last_error is None, dash.last_error
    assert dash.run_count == 1 and dash.result is not None
    assert dict(dash.result.sizes) == {"replication": 2, "method": 1, "n_subjects": 2, "ability": 1}
    # the plots show the audit's own summary (means over replications) ...
    summary = summarize(dash.result)
    ax = next(a for a in dash.figure.axes if a.get_title() == "Ranking recovery")
    line = ax.lines[0]  # the means (errorbar adds its caps after it)
    np.testing.assert_allclose(line.get_ydata(), summary["kendall_tau"].sel(
        {"method": "cbmm", "ability": "normal", "statistic": "mean"}).values)
    _assert_labelled(dash.figure)
    assert _png(dash.plots_out)
    # ... and the table one row per cell
    assert len(dash.table_rows) == 2 and dash.table.value.count("<tr>") == 3
    assert "done: 2 replication(s)" in dash.status_text

    # another bank and ability shape: the methods follow the bank, the result is replaced
    dash.bank_select.value = "tiny_lart"
    assert "saem" in dash.methods_select.options
    assert "bank" in [v for _, v in dash.ability_select.options]  # the bank has calibration LLMs
    dash.ability_select.value = "bank"
    dash.sizes_select.value = (30,)
    dash.replications_slider.value = 1
    dash.run_button.click()
    assert dash.last_error is None and dash.run_count == 2
    assert dash.result.attrs["bank_id"] == "tiny_lart" and len(dash.table_rows) == 1

    dash.methods_select.value = ()
    dash.run_button.click()
    assert dash.run_count == 2 and "at least one" in dash.last_error
