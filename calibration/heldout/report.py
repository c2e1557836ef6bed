"""The held-out check's record as text: what ``calibration fit`` prints after a bank's check."""

from __future__ import annotations

__all__ = ["describe"]


def describe(record: dict) -> str:
    """The held-out check's ``record`` (the parsed ``interval_calibration`` attribute), one line per
    curve: c(L) and the measured RMS ratio before calibration, the score curves, the
    strength-ordered sides and any widening of b_sd."""
    groups = record.get("n_llm_groups")
    over = (f"{record['n_subjects']} runs of {groups} LLMs" if groups and groups < record["n_subjects"]
            else f"{record['n_subjects']} LLMs")
    lines = [f"interval check: {record['folds']} folds over {over}, {record['seconds']} s; "
             "sessions multiply SD(theta) by c(L) after L items"]
    how = record.get("llm_groups", "")
    if how.startswith("detected"):
        lines.append(f"  runs of one LLM held out together, grouped by the run suffix of their ids ({how}); "
                     "--same-llm-pattern sets the groups yourself")
    for name, cur in record["curves"].items():
        pairs = ", ".join(f"L={L}: c={c:.2f} (RMS z {r:.2f})" for L, c, r in
                          zip(cur["test_length"], cur["c"], cur["rms_ratio_model"]))
        lines.append(f"  {name}: {pairs}")
    for name, cur in (record.get("score_curves") or {}).items():
        pairs = ", ".join(f"L={L}: {d:.3f}" for L, d in zip(cur["test_length"], cur["residual_sd"]))
        lines.append(f"  score check, {name}: residual SD per unanswered item {pairs}")
        if cur.get("cot_log_sd"):
            pairs = ", ".join(f"L={L}: {d:.2f}" for L, d in zip(cur["test_length"], cur["cot_log_sd"]))
            lines.append(f"  score check, {name}: CoT-total log-SD {pairs}")
    for side, part in (record.get("beyond") or {}).items():
        if not isinstance(part, dict) or "curves" not in part:
            continue
        lo, hi = part["calibration_accuracy_range"]
        for name, cur in part["curves"].items():
            pairs = ", ".join(f"L={L}: c={c:.2f}" for L, c in zip(cur["test_length"], cur["c"]))
            lines.append(f"  beyond the calibration range ({side}: {part['n_held_out']} runs held out, a bank from "
                         f"accuracies {lo:.2f}-{hi:.2f}), {name}: {pairs}")
        for name, cur in (part.get("score_curves") or {}).items():
            if cur.get("accuracy_mae") and cur.get("random_mean_mae"):
                pairs = ", ".join(f"L={L}: {m / r:.2f}x" for L, m, r in
                                  zip(cur["test_length"], cur["accuracy_mae"], cur["random_mean_mae"]) if r > 0)
                lines.append(f"  beyond ({side}), {name}: the model's score error vs the mean of as many random items {pairs}")
    b = record.get("item_sd_factors", {}).get("b_applied", 1.0)
    if b and b > 1.0:
        lines.append(f"  b_sd widened x{b:.2f} to the cross-fitted refit spread")
    return "\n".join(lines)
