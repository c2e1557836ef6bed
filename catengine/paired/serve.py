"""A JSON-lines protocol driving one :class:`PairedSession` (``catengine compare --serve``), for a
harness that asks both LLMs itself.

One request per line of stdin, one reply per line of stdout, in order; every reply has ``"ok"``
and ``"protocol": "paired-1"``, and echoes the request's ``"id"``. Requests:

* ``{"op": "next"}`` -> ``{"item": ID, "finished": bool, "reason": str | null}``: the item both LLMs
  answer next (the same until it is recorded);
* ``{"op": "record", "item": ID, "correct_a": 0|1, "correct_b": 0|1, "cot_length_a": n,
  "cot_length_b": n}`` (``correct_b`` may be left out against a calibration LLM; CoT lengths are
  optional) -> ``{"comparison": C, "finished": bool, "reason": str | null}``;
* ``{"op": "comparison"}`` -> ``{"comparison": C}`` with the CoT figures of LaRT banks;
* ``{"op": "quit"}`` (or end of input) stops the server.

``C`` is ``Comparison.to_dict()``: ``difference``, ``low``, ``high``, ``decision`` ("a", "b",
"tie", "undecided"), ``n_items``, ``method``, ... (docs/comparisons.md). A failed request gets
``{"ok": false, "error": message}`` and changes nothing.
"""

from __future__ import annotations

import json

PAIRED_PROTOCOL = "paired-1"
OPS = ("next", "record", "comparison", "quit")


def _reply(request, **fields) -> str:
    out = {"ok": True, "protocol": PAIRED_PROTOCOL}
    if isinstance(request, dict) and "id" in request:
        out["id"] = request["id"]
    out.update(fields)
    return json.dumps(out, allow_nan=False, default=str)


def handle(session, request: dict) -> tuple[str, bool]:
    """``(reply line, stop)`` for one request."""
    try:
        if not isinstance(request, dict):
            raise ValueError("a request is a JSON object")
        op = request.get("op")
        if op == "quit":
            return _reply(request), True
        if op == "next":
            item = session.next_item()
            return _reply(request, item=item, finished=session.finished, reason=session.stop_reason), False
        if op == "record":
            for key in ("item", "correct_a"):
                if key not in request:
                    raise ValueError(f"record needs {key!r}")
            c = session.record(request["item"], request["correct_a"], request.get("correct_b"),
                               request.get("cot_length_a"), request.get("cot_length_b"))
            return _reply(request, comparison=c.to_dict(), finished=session.finished,
                          reason=session.stop_reason), False
        if op == "comparison":
            return _reply(request, comparison=session.comparison().to_dict()), False
        raise ValueError(f"unknown op {op!r}; ops: {', '.join(OPS)}")
    except Exception as exc:  # noqa: BLE001 - every failure is a reply, never a crash of the server
        out = {"ok": False, "protocol": PAIRED_PROTOCOL, "error": f"{type(exc).__name__}: {str(exc)[:1000]}"}
        if isinstance(request, dict) and "id" in request:
            out["id"] = request["id"]
        return json.dumps(out, default=str), False


def serve_pair(session, stdin, stdout) -> int:
    """Answer requests from ``stdin`` until ``quit`` or end of input; returns the exit status 0."""
    for line in stdin:
        if not line.strip():
            continue
        try:
            request = json.loads(line)
        except ValueError as exc:
            stdout.write(json.dumps({"ok": False, "protocol": PAIRED_PROTOCOL, "error": f"not JSON: {exc}"}) + "\n")
            stdout.flush()
            continue
        reply, stop = handle(session, request)
        stdout.write(reply + "\n")
        stdout.flush()
        if stop:
            break
    return 0
