"""``SessionPanel``: a live view of one adaptive test (a :class:`catengine.session.CATSession`).

The panel only forwards answers to the session (``next_item`` / ``record``) and shows what the
session and the bank report: the proposed item and its criterion value, the estimate and its
interval (``TraitEstimate.interval``), the history, and P(ahead) of the calibration LLMs from the
bank's ``subjects`` group (``catengine.stopping.RivalOrderDecided.probabilities``). Answers come
from the buttons (with a CoT length for LaRT banks) or from a *responder*: a simulated LLM
(:class:`SimulatedLLM`, drawing with ``catengine.session.simulate_answer``) or a replayed one
(:class:`ReplayedLLM`, a lookup in a known response vector).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import ipywidgets as widgets
import numpy as np

from catengine.console import calibration_size, standing_text
from catengine.errors import BankExhaustedError, CatEngineError
from catengine.widgets.display import escape, fmt, html_table, new_figure, show_figure

THETA_LABEL = "ability θ (population SD units)"
_USER_ERRORS = (CatEngineError, ValueError, TypeError, KeyError)  # shown in the panel, not raised


class SimulatedLLM:
    """A simulated LLM with traits (theta, tau): answers drawn by ``catengine.session.simulate_answer``.

    ``theta`` / ``tau`` default to a draw from the bank's population (``draw_traits``); ``rng``
    is a Generator, an int seed or None.
    """

    def __init__(self, bank, theta: float | None = None, tau: float | None = None, *, rng=None):
        from catengine.session import draw_traits

        self.bank = bank
        self.params = bank.params
        self.rng = np.random.default_rng(rng)
        if theta is None:
            theta, drawn_tau = draw_traits(self.params, self.rng)
            tau = drawn_tau if tau is None else tau
        if self.params.model.has_cot and tau is None:
            raise ValueError("a simulated LLM on a LaRT bank needs tau (or leave theta=None to draw both)")
        self.theta = float(theta)
        self.tau = None if tau is None else float(tau)
        self.cot_offset = bank.effective_cot_offset
        self.label = f"simulated LLM (true θ = {self.theta:+.2f})"

    def __call__(self, item_id):
        from catengine.session import simulate_answer

        return simulate_answer(self.params, self.bank.index_of(item_id), self.theta, self.tau, self.rng, self.cot_offset)


class MissingAnswer(CatEngineError, KeyError):
    """A responder has no answer for this item (the panel excludes the item and moves on)."""


class ReplayedLLM:
    """An LLM replayed from a known response vector: ``item id -> (correct, CoT tokens or None)``.

    ``correct`` (and optional ``cot_length``) are sequences aligned with ``item_ids``; a missing
    answer (correct < 0, or NaN) raises :class:`MissingAnswer` when that item is asked for, and
    :class:`SessionPanel` then excludes the item from the session (``CATSession.exclude``).
    """

    def __init__(self, item_ids, correct, cot_length=None, *, label: str = "replayed LLM"):
        ids = [str(i) for i in item_ids]
        correct = np.asarray(correct)
        if correct.shape != (len(ids),):
            raise ValueError(f"correct must have one entry per item id ({len(ids)}), got shape {correct.shape}")
        cot = None if cot_length is None else np.asarray(cot_length, dtype=float)
        if cot is not None and cot.shape != (len(ids),):
            raise ValueError(f"cot_length must have one entry per item id ({len(ids)}), got shape {cot.shape}")
        self._answers = {}
        for k, item in enumerate(ids):
            c = correct[k]
            if (isinstance(c, float) and math.isnan(c)) or c < 0:
                continue
            t = None if cot is None or math.isnan(cot[k]) else float(cot[k])
            self._answers[item] = (int(c), t)
        self.label = label

    def __call__(self, item_id):
        try:
            return self._answers[str(item_id)]
        except KeyError:
            raise MissingAnswer(f"{self.label} has no answer for item {item_id!r}") from None

    def __len__(self) -> int:
        return len(self._answers)


def _as_responder(responder):
    if responder is None or callable(responder):
        return responder
    if isinstance(responder, Mapping):
        answers = dict(responder)

        def lookup(item_id):
            try:
                return answers[item_id]
            except KeyError:
                raise KeyError(f"the responder mapping has no answer for item {item_id!r}") from None

        return lookup
    raise TypeError(f"responder must be a callable item_id -> (correct, cot_length) or a mapping, got {type(responder).__name__}")


def _tokens(value):
    """CoT token counts display as integers when they are whole numbers."""
    if value is None:
        return None
    return int(value) if float(value).is_integer() and abs(value) < 1e15 else float(value)


def _split_answer(answer):
    if isinstance(answer, tuple | list):
        if len(answer) == 2:
            return answer[0], answer[1]
        if len(answer) == 1:
            return answer[0], None
        raise ValueError(f"a responder must return correct or (correct, cot_length), got {answer!r}")
    return answer, None


class SessionPanel(widgets.VBox):
    """Live view of a :class:`~catengine.session.CATSession`.

    * the next item the engine proposes and why (the selector and its criterion value);
    * buttons ``correct`` / ``incorrect`` (with a CoT length in tokens for LaRT banks), ``step``
      (the responder answers the next item) and ``play to end`` (until the stopping rule is met);
    * the trajectory of θ (and τ for LaRT banks) with its ``level`` credible band;
    * the item sequence; the standing among the bank's calibration LLM runs (``ScoreEstimate.percentile``,
      worded as every entry point words it) and the ranking against them with P(ahead);
    * the predicted full-benchmark accuracy after each answer with its ``level`` interval, and the
      current prediction per item category (``CATSession.predicted_score``; tab "predicted score").

    ``responder``: a callable ``item_id -> (correct, cot_tokens)`` (e.g. :class:`SimulatedLLM`,
    :class:`ReplayedLLM`) or a mapping; without one, ``step`` and ``play to end`` are disabled.
    ``reference_theta``: a value to draw as a horizontal line (e.g. the full-benchmark estimate);
    a responder's own ``theta`` (a simulated LLM's truth) is drawn too.

    State for tests and scripts: ``n_items``, ``next_item_id``, ``next_criterion``, ``status_text``,
    ``sequence_header`` / ``sequence_rows``, ``ranking_header`` / ``ranking_rows`` /
    ``ranking_message``, ``trajectory_figure``, ``score`` (the current ScoreEstimate), ``score_text``,
    ``score_trajectory`` (step, accuracy, low, high per answer), ``score_figure``, ``last_error``, ``excluded`` (items the responder
    had no answer for, excluded from the session); buttons ``correct_button``,
    ``incorrect_button``, ``step_button``, ``play_button``; input ``cot_input``.
    """

    def __init__(self, session, responder=None, *, title: str | None = None, reference_theta: float | None = None,
                 level: float = 0.95, max_play: int | None = None, show_ranking: bool = True):
        for name in ("next_item", "record", "history", "estimate", "finished", "bank"):
            if not hasattr(session, name):
                raise TypeError(f"SessionPanel needs a CATSession, got {type(session).__name__} (no {name!r})")
        if not 0.0 < level < 1.0:
            raise ValueError(f"level must lie in (0, 1), got {level!r}")
        self.session = session
        self.bank = session.bank
        self.params = self.bank.params
        self.responder = _as_responder(responder)
        self.level = float(level)
        self.reference_theta = None if reference_theta is None else float(reference_theta)
        self.max_play = int(max_play) if max_play is not None else self.params.n_items
        self.is_lart = self.params.model.has_cot
        label = getattr(responder, "label", None)
        self.title = title or f"Adaptive test of {session.subject!r}" + (f" — {label}" if label else "")

        self.n_items = 0
        self.next_item_id: str | None = None
        self.next_criterion: float | None = None
        self.status_text = ""
        self.sequence_header = ["step", "item", "correct", "CoT tokens", "θ", "SD(θ)", "criterion", "proposed"]
        self.sequence_rows: list[tuple] = []
        self.ranking_header = ["rank", "LLM", "θ", "SD(θ)", f"P({session.subject} ahead)"]
        self.ranking_rows: list[tuple] = []
        self.ranking_message = ""
        self.trajectory_figure = None
        self.score = None
        self.score_text = ""
        self.score_trajectory: list[tuple[int, float, float, float]] = []
        self.score_figure = None
        self.last_error: str | None = None
        self.excluded: list[str] = []

        self.title_html = widgets.HTML(f"<h4 style='margin:2px 0'>{escape(self.title)}</h4>")
        self.count_label = widgets.HTML()
        self.count_label.add_class("catengine-item-count")
        self.status = widgets.HTML()
        self.next_html = widgets.HTML()
        self.next_html.add_class("catengine-next-item")
        self.error_html = widgets.HTML()
        self.cot_input = widgets.Text(value="", placeholder="blank = unknown", description="CoT tokens",
                                      layout=widgets.Layout(width="16em", display=None if self.is_lart else "none"))
        self.correct_button = widgets.Button(description="correct", button_style="success", icon="check")
        self.incorrect_button = widgets.Button(description="incorrect", button_style="danger", icon="times")
        self.step_button = widgets.Button(description="step", tooltip="let the responder answer the next item")
        self.play_button = widgets.Button(description="play to end", tooltip="let the responder answer until the test stops")
        for b in (self.correct_button, self.incorrect_button, self.step_button, self.play_button):
            b.add_class("catengine-" + b.description.replace(" ", "-"))
        self.trajectory_out = widgets.Output()
        self.sequence_html = widgets.HTML()
        self.ranking_html = widgets.HTML()
        self.score_html = widgets.HTML()
        self.score_out = widgets.Output()

        self._rivals = None
        if show_ranking:
            self._rivals = self._make_rivals()

        buttons = widgets.HBox([self.cot_input, self.correct_button, self.incorrect_button, self.step_button, self.play_button])
        tabs = widgets.Tab(children=[self.sequence_html, self.ranking_html, widgets.VBox([self.score_html, self.score_out])])
        tabs.set_title(0, "item sequence")
        tabs.set_title(1, "ranking")
        tabs.set_title(2, "predicted score")
        super().__init__([self.title_html, widgets.HBox([self.count_label, self.status]), self.next_html, buttons,
                          self.error_html, self.trajectory_out, tabs])
        self.add_class("catengine-session-panel")

        self.correct_button.on_click(lambda _b: self.answer(1))
        self.incorrect_button.on_click(lambda _b: self.answer(0))
        self.step_button.on_click(lambda _b: self.step())
        self.play_button.on_click(lambda _b: self.play())
        self.refresh()

    # ------------------------------------------------------------------ library values
    def _make_rivals(self):
        subjects = self.bank.subjects
        if subjects is None or "theta" not in subjects or "theta_sd" not in subjects:
            self.ranking_message = f"bank {self.bank.bank_id!r} stores no calibration LLMs (no subjects group with theta, theta_sd)"
            return None
        from catengine.stopping import RivalOrderDecided

        ids = [str(s) for s in subjects["subject"].values]
        try:
            return RivalOrderDecided.from_bank(self.bank, ids)
        except (ValueError, KeyError) as exc:
            self.ranking_message = f"ranking unavailable: {exc}"
            return None

    # ------------------------------------------------------------------ actions
    def _cot_value(self):
        text = self.cot_input.value.strip()
        if not self.is_lart or not text:
            return None
        try:
            return float(text)
        except ValueError:
            raise ValueError(f"CoT tokens must be a number (or blank for unknown), got {text!r}") from None

    def _report(self, exc: Exception) -> None:
        self.last_error = f"{type(exc).__name__}: {exc}"
        self.error_html.value = f"<span style='color:#b00'>{escape(self.last_error)}</span>"

    def _start_action(self, needs_responder: str | None = None) -> bool:
        """Clear the error line; False (with the error shown) if ``needs_responder`` names an action without one."""
        self.last_error = None
        self.error_html.value = ""
        if needs_responder and self.responder is None:
            self._report(RuntimeError(f"no responder: pass responder= (e.g. SimulatedLLM, ReplayedLLM) to {needs_responder}"))
            return False
        return True

    def _attempt(self, action) -> bool:
        """Run ``action``; a user error is shown instead of raised; redraw either way. True if it ran through."""
        try:
            action()
        except _USER_ERRORS as exc:
            self._report(exc)
            return False
        finally:
            self.refresh()
        return True

    def answer(self, correct: int, cot_length=None) -> bool:
        """Record an answer to the proposed item (CoT length from ``cot_length`` or the input box)."""
        self._start_action()

        def record():
            cot = cot_length if cot_length is not None else self._cot_value()
            self.session.record(self.session.next_item(), correct, cot_length=cot)

        return self._attempt(record)

    def _step_once(self) -> bool:
        """One answer from the responder; items it has no answer for are excluded first."""
        while True:
            item = self.session.next_item()
            try:
                answer = self.responder(item)
            except MissingAnswer:
                self.session.exclude(item)
                self.excluded.append(item)
                if self.session.finished:
                    return False
                continue
            correct, cot = _split_answer(answer)
            self.session.record(item, correct, cot_length=cot)
            return True

    def step(self) -> bool:
        """Let the responder answer the next item (no-op when the test is finished)."""
        if not self._start_action("step"):
            return False
        if self.session.finished:
            self.refresh()
            return False
        return self._attempt(self._step_once)

    def play(self, max_steps: int | None = None) -> int:
        """Let the responder answer until the stopping rule is met (at most ``max_steps``); returns the count."""
        if not self._start_action("play"):
            return 0
        limit = self.max_play if max_steps is None else int(max_steps)
        done = 0

        def run():
            nonlocal done
            while done < limit and not self.session.finished:
                if not self._step_once():
                    break
                done += 1
                if done % 10 == 0:
                    self.count_label.value = self._count_html()

        self._attempt(run)
        return done

    # ------------------------------------------------------------------ rendering
    def _count_html(self) -> str:
        return f"<b>items administered: <span class='catengine-count-value'>{self.session.n_items}</span></b>&nbsp;&nbsp;"

    def refresh(self) -> None:
        """Redraw everything from the session's current state."""
        s = self.session
        est = s.estimate
        self.n_items = int(s.n_items)
        self.count_label.value = self._count_html()
        lo, hi = est.interval(self.level)
        pct = int(round(self.level * 100))
        text = f"θ = {est.theta:+.3f} (SD {est.theta_sd:.3f}, {pct}% interval [{lo:+.2f}, {hi:+.2f}])"
        if est.tau is not None:
            text += f"; τ = {est.tau:+.3f} (SD {est.tau_sd:.3f})"
        reason = s.stop_reason
        text += f" — finished: {reason}" if reason else " — running"
        if s.n_unproposed:
            text += f" ({s.n_unproposed} answer(s) to items the engine did not propose: not a fully adaptive test)"
        self.status_text = text
        self.status.value = escape(text)

        self.next_item_id, self.next_criterion = None, None
        selector = type(s.selector).__name__
        if reason is None:
            try:
                self.next_item_id = s.next_item()
            except BankExhaustedError as exc:
                self._report(exc)
        else:
            self.next_item_id = getattr(s, "pending_item", None)
        if self.next_item_id is not None:
            crit = s.pending_criterion
            self.next_criterion = None if crit is None else float(crit)
            adaptive_for = getattr(s.selector, "adaptive_for", None)
            if crit is not None and np.isfinite(self.next_criterion) and s.pending_is_design_draw:
                why = f"drawn at random with known probability {self.next_criterion:.4g} (a design draw of {escape(selector)})"
            elif crit is not None and np.isfinite(self.next_criterion) and adaptive_for is not None:
                rule = adaptive_for(s.items)
                why = (f"{escape(rule.explain_criterion(self.next_criterion))} ({escape(type(rule).__name__)}) "
                       f"— an adaptive step of {escape(selector)}")
            elif crit is not None and np.isfinite(self.next_criterion):
                why = f"{escape(s.selector.explain_criterion(self.next_criterion))} ({escape(selector)})"
            else:
                why = f"chosen by {escape(selector)}"
            self.next_html.value = f"next item: <b><code>{escape(self.next_item_id)}</code></b> — {why}"
        else:
            self.next_html.value = "the test is finished" + (f" ({escape(reason)})" if reason else "")
        finished = reason is not None
        exhausted = self.next_item_id is None
        self.step_button.disabled = finished or self.responder is None
        self.play_button.disabled = finished or self.responder is None
        self.correct_button.disabled = exhausted
        self.incorrect_button.disabled = exhausted

        history = s.history
        self.sequence_rows = [
            (r.step, r.item, r.correct, _tokens(r.cot_length), r.theta, r.theta_sd, r.criterion,
             "yes" if r.proposed else "no")
            for r in history
        ]
        self.sequence_html.value = html_table(self.sequence_header, self.sequence_rows) if history else "no answer yet"
        self._draw_trajectory(history)
        self._refresh_score(history)
        self._refresh_ranking(est)

    def _refresh_score(self, history) -> None:
        """The predicted full-benchmark accuracy: its trajectory (cached per answer) and per-category bars."""
        from catengine.estimation import TraitEstimate
        from catengine.session.scoring import model_score

        s = self.session
        self.score_trajectory = self.score_trajectory[: len(history)]
        for t in range(len(self.score_trajectory), len(history)):
            r = history[t]
            est = TraitEstimate(theta=r.theta, theta_sd=r.theta_sd, n_items=t + 1, tau=r.tau, tau_sd=r.tau_sd)
            sc = model_score(s, level=self.level, by=False, estimate=est, n_answered=t + 1, n_nodes=21)
            self.score_trajectory.append((t + 1, sc.accuracy, sc.low, sc.high))
        self.score = s.predicted_score(level=self.level)
        self.score_text = str(self.score)
        self.score_html.value = escape(self.score_text)
        cats = self.score.by_category
        fig, axes = new_figure(2 if cats else 1, width=5.5, height=3.3)
        pct = int(round(self.level * 100))
        ax = axes[0]
        if self.score_trajectory:
            tr = np.array(self.score_trajectory)
            ax.fill_between(tr[:, 0], 100 * tr[:, 2], 100 * tr[:, 3], color="C0", alpha=0.2, lw=0, label=f"{pct}% interval")
            ax.plot(tr[:, 0], 100 * tr[:, 1], color="C0", lw=1.5, label="predicted accuracy (model)")
            if self.score.method != "model":  # the session's reported estimate, when it is not the model's
                acc, low, high = self.score.accuracy, self.score.low, self.score.high
                ax.errorbar([self.score.n_observed], [100 * acc],  # the interval is clipped to [0, 1], the estimate not
                            yerr=[[100 * max(acc - low, 0.0)], [100 * max(high - acc, 0.0)]],
                            fmt="o", color="C3", ms=4, capsize=3, label="design-based estimate")
            ax.legend(fontsize="x-small", loc="best")
        else:
            ax.text(0.5, 0.5, "no answer yet", ha="center", va="center", transform=ax.transAxes)
        ax.set_title(f"Predicted full-benchmark accuracy ({self.score.n_items} items)")
        ax.set_xlabel("number of items administered (items)")
        ax.set_ylabel("accuracy (%)")
        if cats:
            labels = list(cats)
            acc = np.array([100 * cats[k].accuracy for k in labels])
            err = np.array([[100 * (cats[k].accuracy - cats[k].low) for k in labels],
                            [100 * (cats[k].high - cats[k].accuracy) for k in labels]])
            axes[1].barh(np.arange(len(labels)), acc, xerr=err, color="C0", alpha=0.7, capsize=2)
            axes[1].set_yticks(np.arange(len(labels)), labels, fontsize="x-small")
            axes[1].set_xlabel("predicted accuracy (%)")
            axes[1].set_title(f"By {self.score.category_field} ({pct}% intervals)")
        self.score_figure = fig
        show_figure(self.score_out, fig)

    def _draw_trajectory(self, history) -> None:
        from catengine.estimation import TraitEstimate

        n_axes = 2 if self.is_lart else 1
        fig, axes = new_figure(n_axes, width=5.5, height=3.3)
        ax = axes[0]
        pct = int(round(self.level * 100))
        if history:
            steps = np.array([r.step for r in history])
            theta = np.array([r.theta for r in history])
            band = np.array([TraitEstimate(r.theta, r.theta_sd, r.step, interval_z95=r.interval_z95).interval(self.level)
                             for r in history])
            ax.fill_between(steps, band[:, 0], band[:, 1], color="C0", alpha=0.2, lw=0, label=f"{pct}% interval")
            ax.plot(steps, theta, color="C0", lw=1.5, label="estimate of θ")
            correct = np.array([r.correct for r in history], dtype=bool)
            ax.scatter(steps[correct], theta[correct], color="C2", s=14, zorder=3, label="correct")
            ax.scatter(steps[~correct], theta[~correct], color="C3", marker="x", s=14, zorder=3, label="incorrect")
            if self.is_lart:
                tau = np.array([np.nan if r.tau is None else r.tau for r in history])
                tband = np.array([
                    TraitEstimate(r.tau, r.tau_sd, r.step).interval(self.level) if r.tau is not None else (np.nan, np.nan)
                    for r in history
                ])
                axes[1].fill_between(steps, tband[:, 0], tband[:, 1], color="C1", alpha=0.2, lw=0, label=f"{pct}% interval")
                axes[1].plot(steps, tau, color="C1", lw=1.5, label="estimate of τ")
        else:
            ax.text(0.5, 0.5, "no answer yet", ha="center", va="center", transform=ax.transAxes)
        true_theta = getattr(self.responder, "theta", None)
        if true_theta is not None:
            ax.axhline(float(true_theta), color="k", ls="--", lw=1, label="true θ (simulated)")
        if self.reference_theta is not None:
            ax.axhline(self.reference_theta, color="C4", ls=":", lw=1.5, label="reference θ")
        true_tau = getattr(self.responder, "tau", None)
        if self.is_lart and true_tau is not None:
            axes[1].axhline(float(true_tau), color="k", ls="--", lw=1, label="true τ (simulated)")
        from matplotlib.ticker import MaxNLocator

        last_step = max((r.step for r in history), default=1)
        for a in axes:
            a.xaxis.set_major_locator(MaxNLocator(integer=True))
            a.set_xlim(0.5, max(last_step, 2) + 0.5)  # whole items: no 0.945 ... 1.050 axis after one answer
        ax.set_title(f"Trajectory of θ with its {pct}% interval")
        ax.set_xlabel("number of items administered (items)")
        ax.set_ylabel(THETA_LABEL)
        if history or true_theta is not None or self.reference_theta is not None:
            ax.legend(fontsize="x-small", loc="best")
        if self.is_lart:
            axes[1].set_title(f"Trajectory of CoT speed τ with its {pct}% interval")
            axes[1].set_xlabel("number of items administered (items)")
            axes[1].set_ylabel("speed τ (population SD units)")
            if history:
                axes[1].legend(fontsize="x-small", loc="best")
        self.trajectory_figure = fig
        show_figure(self.trajectory_out, fig)

    def _refresh_ranking(self, est) -> None:
        if self._rivals is None:
            self.ranking_rows = []
            self.ranking_html.value = escape(self.ranking_message or "ranking not shown")
            return
        probs = self._rivals.probabilities(est)
        rivals = sorted(self._rivals.rivals, key=lambda r: -r[1])
        me = self.session.subject
        rows = []
        inserted = False
        for name, theta, sd in rivals:
            if not inserted and est.theta >= theta:
                rows.append(("→", f"{me} (under test)", est.theta, est.theta_sd, None))
                inserted = True
            rows.append((None, name, theta, sd, probs[name]))
        if not inserted:
            rows.append(("→", f"{me} (under test)", est.theta, est.theta_sd, None))
        ranked = []
        k = 0
        for row in rows:
            if row[0] is None:
                k += 1
                ranked.append((k, *row[1:]))
            else:
                ranked.append(row)
        self.ranking_rows = ranked
        standing = standing_text(self.score, calibration_size(self.session))
        self.ranking_message = (
            (f"{me} is {standing}. " if standing else "")
            + f"P(ahead) = P(θ_{me} > θ_LLM) = Φ((θ_{me} − θ_LLM) / √(SD_{me}² + SD_LLM²)), treating both as "
            f"independent normal posteriors; SD_{me} is the session's reported SD ({est.theta_sd:.3f}), the "
            f"same one as in the {int(round(self.level * 100))}% interval above, so P(ahead) is only as honest "
            f"as that interval. Values beyond 0.001 / 0.999 are shown as bounds."
        )
        shown = [(*r[:4], None if r[4] is None else format_probability(r[4])) for r in ranked]
        self.ranking_html.value = f"<div>{escape(self.ranking_message)}</div>" + html_table(self.ranking_header, shown)


def format_probability(p: float) -> str:
    """A probability for display: three decimals, and bounds instead of meaningless tiny tails."""
    if p is None or not np.isfinite(p):
        return "–"
    if p < 0.001:
        return "< 0.001"
    if p > 0.999:
        return "> 0.999"
    return f"{p:.3f}"


__all__ = ["MissingAnswer", "ReplayedLLM", "SessionPanel", "SimulatedLLM", "format_probability"]
