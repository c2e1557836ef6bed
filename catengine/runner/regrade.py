"""Grade a finished run's replies again (``catengine regrade``): the log keeps every reply's text, so
another grader (or a newer version of the same one) can score the same run without asking the LLM.

The regraded score is the model-based prediction from the same items, in the same order, with the
new verdicts. The doubly robust correction is not recomputed: the design's inclusion probabilities
were computed from the original run's verdicts, so a session replayed with other verdicts would
assign its draws probabilities they were never drawn with. The report says how many verdicts
changed and shows both runs' scores.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class RegradeReport:
    """What a regrade found: the graders, the verdicts that changed, both scores."""

    log: str
    bank_id: str
    original_grader: str
    grader: str
    n_answers: int
    changed: list[dict] = field(default_factory=list)
    original_score: object = None
    original_model_score: object = None
    regraded_score: object = None

    def to_dict(self) -> dict:
        return {"log": self.log, "bank": self.bank_id, "original_grader": self.original_grader, "grader": self.grader,
                "n_answers": self.n_answers, "n_changed": len(self.changed), "changed": self.changed,
                "original_score": self.original_score.to_dict(), "original_model_score": self.original_model_score.to_dict(),
                "regraded_model_score": self.regraded_score.to_dict()}

    def lines(self) -> list[str]:
        out = [f"{self.log}: {self.n_answers} replies on {self.bank_id}, graded by {self.original_grader}, regraded by "
               f"{self.grader}: {len(self.changed)} verdict(s) changed"]
        for change in self.changed[:20]:
            out.append(f"  {change['item']}: {change['before']} -> {change['after']} ({change['reason']}; "
                       f"read {change['extracted']!r})")
        if len(self.changed) > 20:
            out.append(f"  ... and {len(self.changed) - 20} more")
        o, m, r = self.original_score, self.original_model_score, self.regraded_score
        out.append(f"original run:  {100 * o.accuracy:.1f}% ({100 * o.low:.1f}-{100 * o.high:.1f}%, {o.method}); "
                   f"the model's prediction {100 * m.accuracy:.1f}% ({100 * m.low:.1f}-{100 * m.high:.1f}%)")
        out.append(f"regraded:      {100 * r.accuracy:.1f}% ({100 * r.low:.1f}-{100 * r.high:.1f}%), the model's "
                   "prediction from the same items (the design-based correction belongs to the original verdicts)")
        return out


def regrade_log(log, *, bank=None, grader=None, content=None) -> RegradeReport:
    """Regrade the replies in the run log ``log`` with ``grader`` (a name or a grader; default the bank's)."""
    from catengine.runner.run import protocol_grader
    from catengine.session import CATSession
    from catengine.session.bank_log import item_table, read_for_resume, replay_events
    from catengine.session.errors import SessionLogError

    contents, bank, strategies = read_for_resume(log, bank)
    if content is not None:
        bank = bank.with_content_file(content)
    if not bank.has_content:
        raise SessionLogError(f"bank {bank.bank_id!r} holds no item content: its replies cannot be regraded")
    items = item_table(bank)
    sessions = replay_events(log, contents, lambda name, rng: CATSession.sharing(items, bank, subject=name, rng=rng,
                                                                                  **strategies))
    if len(sessions) != 1:
        raise SessionLogError(f"{log} holds {len(sessions)} sessions; a run log holds one")
    original = next(iter(sessions.values()))
    new_grader = grader if grader is not None and not isinstance(grader, str) else protocol_grader(bank.protocol, grader)
    records = [e for e in contents.events if e.get("event") == "record"]
    missing = [e["item"] for e in records if not isinstance(e.get("evidence"), dict) or "text" not in e["evidence"]]
    if missing:
        raise SessionLogError(f"{log}: {len(missing)} answer(s) carry no reply text (first {missing[0]!r}); only a "
                              "`catengine run` log can be regraded")
    regraded = CATSession(bank, estimator=original.estimator, stopping=original.stopping, selector=original.selector)
    changed = []
    for event in records:
        content = bank.content(event["item"])
        grade = new_grader.grade(event["evidence"]["text"], content)
        if int(grade.correct) != int(event["correct"]):
            changed.append({"item": event["item"], "before": int(event["correct"]), "after": int(grade.correct),
                            "reason": grade.reason, "extracted": grade.extracted})
        regraded.record(event["item"], int(grade.correct), event.get("cot_length"))
    first = records[0]["evidence"] if records else {}
    return RegradeReport(log=str(log), bank_id=bank.bank_id,
                         original_grader=f"{first.get('grader', '?')} {first.get('grader_version', '')}".strip(),
                         grader=f"{new_grader.name} {new_grader.version}", n_answers=len(records), changed=changed,
                         original_score=original.predicted_score(), original_model_score=original.predicted_score(method="model"),
                         regraded_score=regraded.predicted_score(method="model"))
