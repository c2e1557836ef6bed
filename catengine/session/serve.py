"""The JSON-lines protocol of ``catengine serve``: one request object per line in, one reply per line out.

Requests (``"id"``, if given, is echoed back):

    {"op": "next",     "subject": S}                                  -> {"ok": true, "item": ID | null, "finished": bool, ...}
    {"op": "record",   "subject": S, "item": ID, "correct": 0|1, "cot_length": tokens | null}
                                                                      -> {"ok": true, "estimate": {...}, "finished": bool, ...}
    {"op": "estimate", "subject": S}                                  -> {"ok": true, "estimate": {...}, "n_items": n, ...}
    {"op": "start",    "subject": S}                                  -> {"ok": true, ...}
    {"op": "exclude",  "subject": S, "item": ID}                      -> {"ok": true}
    {"op": "subjects"}                                                -> {"ok": true, "subjects": [...]}
    {"op": "quit"}                                                    -> {"ok": true, "bye": true}, then exit

``next`` starts the subject's session when it is new; once the stopping rule is met it answers
``"item": null, "finished": true`` with the reason (send ``"force": true`` to get an item anyway).
Every error — malformed JSON, unknown op, unknown subject or item, bad values — is answered as
``{"ok": false, "error": <type>, "message": <text>}`` and the server keeps going. End of input
(closed stdin) ends the server cleanly.
"""

from __future__ import annotations

import json
import math
import sys
import warnings

from catengine.errors import BankExhaustedError, CatEngineError
from catengine.session.engine import Engine


def _estimate(est) -> dict:
    out = {"theta": est.theta, "theta_sd": est.theta_sd, "n_items": est.n_items}
    if est.tau is not None:
        out["tau"], out["tau_sd"] = est.tau, est.tau_sd
    lo, hi = est.interval(0.95)
    out["theta_95"] = [lo, hi]
    if est.interval_calibration:
        out["interval_calibration"] = est.interval_calibration
    return out


def _field(req: dict, name: str, kind=str):
    if name not in req:
        raise ValueError(f"request lacks {name!r}")
    value = req[name]
    if kind is str and not isinstance(value, str):
        raise ValueError(f"{name!r} must be a string, got {value!r}")
    return value


def handle(engine: Engine, req) -> dict:
    """Answer one parsed request (never raises for bad requests: the reply says what was wrong)."""
    if not isinstance(req, dict):
        raise ValueError(f"a request is a JSON object, got {type(req).__name__}")
    op = req.get("op")
    if op == "next":
        session = engine.start(_field(req, "subject"))
        reason = session.stop_reason
        if reason is not None and not req.get("force", False):
            return {"item": None, "finished": True, "reason": reason, "estimate": _estimate(session.estimate)}
        try:
            item = session.next_item()
        except BankExhaustedError as exc:
            return {"item": None, "finished": True, "reason": str(exc), "estimate": _estimate(session.estimate)}
        return {"item": item, "finished": False, "step": session.n_items + 1}
    if op == "record":
        subject = _field(req, "subject")
        item = _field(req, "item")
        if "correct" not in req:
            raise ValueError("request lacks 'correct'")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            est = engine.record(subject, item, req["correct"], req.get("cot_length"))
        session = engine.session(subject)
        reply = {"estimate": _estimate(est), "finished": session.finished, "reason": session.stop_reason}
        if caught:
            reply["warnings"] = [str(w.message) for w in caught]
        return reply
    if op == "estimate":
        session = engine.session(_field(req, "subject"))
        return {"estimate": _estimate(session.estimate), "finished": session.finished, "reason": session.stop_reason,
                "administered": session.administered, "person_fit": session.person_fit().to_dict()}
    if op == "start":
        session = engine.start(_field(req, "subject"))
        return {"estimate": _estimate(session.estimate), "n_items": session.n_items}
    if op == "exclude":
        engine.session(_field(req, "subject")).exclude(_field(req, "item"))
        return {}
    if op == "subjects":
        return {"subjects": sorted(engine.sessions)}
    if op == "quit":
        return {"bye": True}
    raise ValueError(f"unknown op {op!r}; use next, record, estimate, start, exclude, subjects or quit")


def _finite_json(obj):
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite_json(v) for v in obj]
    return obj


def serve(engine: Engine, stdin=None, stdout=None) -> int:
    """Run the protocol until end of input or ``quit``. Returns the exit status (0)."""
    stdin = sys.stdin if stdin is None else stdin
    stdout = sys.stdout if stdout is None else stdout
    while True:
        try:
            line = stdin.readline()
        except (KeyboardInterrupt, OSError, ValueError):
            break
        if not line:
            break  # closed stdin
        line = line.strip()
        if not line:
            continue
        reply: dict
        req = None
        try:
            req = json.loads(line)
            reply = {"ok": True, **handle(engine, req)}
        except json.JSONDecodeError as exc:
            reply = {"ok": False, "error": "MalformedJSON", "message": f"request is not valid JSON: {exc}"}
        except (CatEngineError, ValueError, TypeError, KeyError) as exc:
            message = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
            reply = {"ok": False, "error": type(exc).__name__, "message": message}
        except Exception as exc:  # noqa: BLE001 - the server must survive anything a request triggers
            reply = {"ok": False, "error": type(exc).__name__, "message": f"internal error: {exc}"}
        if isinstance(req, dict) and "id" in req:
            reply["id"] = req["id"]
        try:
            stdout.write(json.dumps(_finite_json(reply)) + "\n")
            stdout.flush()
        except (BrokenPipeError, OSError, ValueError):
            break
        if isinstance(req, dict) and req.get("op") == "quit" and reply.get("ok"):
            break
    engine.close()
    return 0
