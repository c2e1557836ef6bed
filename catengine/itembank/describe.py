"""A bank's administration protocol and items as text (``catengine banks show``); formatting only."""

from __future__ import annotations

import json
import textwrap


def protocol_lines(bank) -> list[str]:
    """How the bank's items are asked and graded, as indented lines (empty list without content)."""
    protocol = bank.protocol
    if protocol is None:
        return ["  no item content: this bank holds item ids and parameters only (no questions, answers or protocol)"]
    contents = bank.contents()
    types = {}
    for c in contents:
        types[c.answer_type] = types.get(c.answer_type, 0) + 1
    missing = sum(1 for c in contents if c.question is None)
    flagged = [c.item for c in contents if c.grading_note]
    grader = protocol.get("grader", {})
    lines = [f"  items: {len(contents)} ({', '.join(f'{n} {t}' for t, n in sorted(types.items()))})",
             f"  grader: {grader.get('name')} version {grader.get('version', '?')}",
             f"  answer extraction: {protocol.get('answer_extraction', '')}"]
    if missing:
        lines.append(f"  questions: {missing} of {len(contents)} are not in the bank (only their sha256): attach a copy "
                     f"with --content FILE (Python: bank.with_content_file(path))")
    if flagged:
        shown = ", ".join(flagged[:12]) + (f" and {len(flagged) - 12} more" if len(flagged) > 12 else "")
        lines.append(f"  items whose calibration grading is known to be wrong ({len(flagged)}): {shown}")
    if protocol.get("flagged_items"):
        lines.append(f"  {protocol['flagged_items']}")
    runs = protocol.get("calibration_runs")
    if isinstance(runs, dict):
        lines.append("  how the calibration LLMs were run:")
        lines += [f"    {key}: {value}" for key, value in runs.items()]
    elif runs:
        lines.append(f"  how the calibration LLMs were run: {runs}")
    if protocol.get("source"):
        lines.append(f"  content source: {protocol['source']}")
    if protocol.get("canary"):
        lines.append(f"  canary: {protocol['canary']}")
    for answer_type, template in protocol.get("prompts", {}).items():
        lines.append(f"  prompt ({answer_type}):")
        lines += ["    | " + line for line in template.splitlines()]
    return lines


def item_lines(bank, item_id: str, width: int = 100) -> list[str]:
    """One item as indented lines: its parameters, question, options, answer, metadata and grading note."""
    content = bank.content(item_id)
    k = bank.index_of(item_id)
    params = ", ".join(f"{name} = {float(getattr(bank.params, name)[k]):.3f}" for name in bank.params.parameter_names)
    lines = [f"{item_id}  ({bank.response_model}: {params})"]
    if content.question is None:
        lines.append(f"  question: not in the bank (sha256 {content.question_sha256[:16]}...; attach a copy with --content)")
    else:
        lines.append("  question:")
        for paragraph in content.question.splitlines() or [""]:
            lines += ["    " + line for line in (textwrap.wrap(paragraph, width - 4) or [""])]
    for letter, text in zip(content.option_letters, content.options):
        lines.append(f"    {letter}. {text}")
    lines.append(f"  answer ({content.answer_type}"
                 + (f", relative tolerance {content.tolerance:g}" if content.tolerance is not None else "") + f"): {content.answer}")
    if content.metadata:
        lines.append("  " + "; ".join(f"{key}: {value}" for key, value in content.metadata.items() if value))
    if content.grading_note:
        lines.append(f"  calibration grading known to be wrong: {content.grading_note}")
    return lines


def content_json(bank, item_ids=None) -> str:
    """The protocol and the given items' content (default: none) as one JSON document."""
    items = [bank.content(i).as_dict() for i in (item_ids or [])]
    return json.dumps({"bank_id": bank.bank_id, "version": bank.version, "protocol": bank.protocol, "items": items},
                      indent=2, ensure_ascii=False)
