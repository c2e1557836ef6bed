"""The JSON-lines protocol of ``catengine serve`` (protocol version 1): one request object per line
on stdin, one reply object per line on stdout, in order.

Every reply carries ``"ok"`` (true / false) and ``"protocol": 1``; a request's ``"id"`` (any JSON
value), if given, is echoed back. Replies may gain fields in later versions: ignore unknown ones.
The JSON Schema of every reply ships with the package (``catengine/session/serve_protocol.schema.json``,
``catengine.session.serve.protocol_schema()``); docs/serve_protocol.md has examples.

Requests and their replies (S: subject id, a non-empty string; ID: item id of the bank; E: an
estimate {"theta", "theta_sd", "n_items", "theta_95": [lo, hi], and "tau", "tau_sd" for LaRT banks}):

  {"op": "next", "subject": S[, "force": true]}
      -> {"item": ID, "finished": false, "step": n}            the item to administer (the same until answered)
      -> {"item": null, "finished": true, "reason": R, "estimate": E}   the test may stop
  {"op": "next_batch", "subject": S, "k": K[, "force": true]}
      -> {"items": [ID, ...], "finished": false, "step": n}    up to K items chosen jointly, to run in
         parallel and answer in any order; until all are answered (or excluded) it returns the rest
      -> {"items": [], "finished": true, "reason": R, "estimate": E}
  {"op": "record", "subject": S, "item": ID, "correct": 0|1[, "cot_length": tokens|null]}
      -> {"estimate": E, "finished": bool, "reason": R|null[, "warnings": [text, ...]]}
  {"op": "estimate", "subject": S}
      -> {"estimate": E, "finished": bool, "reason": R|null, "administered": [ID, ...], "pending": [ID, ...]}
  {"op": "start", "subject": S}       -> {"estimate": E, "n_items": n}
  {"op": "exclude", "subject": S, "item": ID}   -> {}      (the item is never proposed to S)
  {"op": "subjects"}                  -> {"subjects": [S, ...]}
  {"op": "info"}                      -> {"bank": {"bank_id", "version", "response_model", "n_items"}, "ops": [...]}
  {"op": "quit"}                      -> {"bye": true}, then the server exits

``next`` / ``next_batch`` start the subject's session when it is new; once the stopping rule is met
they answer finished (send ``"force": true`` to get items anyway). Any failure (malformed JSON,
unknown op, unknown subject or item, bad values) is answered as
{"ok": false, "protocol": 1, "error": NAME, "message": TEXT} and the server keeps going. End of
input (closed stdin) ends the server cleanly. With ``--log`` every proposal and answer is in the
session log, and restarting the server on the same log resumes every session (pending items and
half-answered batches included).
"""

from __future__ import annotations

import json
import math
import sys
import warnings

from catengine.errors import BankExhaustedError, CatEngineError
from catengine.session.engine import Engine

PROTOCOL_HELP = __doc__
#: version of the serve protocol, sent in every reply as ``"protocol"``
PROTOCOL_VERSION = 1
SCHEMA_FILE = "serve_protocol.schema.json"
OPS = ("next", "next_batch", "record", "estimate", "start", "exclude", "subjects", "info", "quit")


def protocol_schema() -> dict:
    """The JSON Schema (draft 2020-12) of every reply of the protocol (shipped package data)."""
    from importlib.resources import files

    return json.loads(files("catengine.session").joinpath(SCHEMA_FILE).read_text(encoding="utf-8"))


def _estimate(est) -> dict:
    out = {"theta": est.theta, "theta_sd": est.theta_sd, "n_items": est.n_items}
    if est.tau is not None:
        out["tau"], out["tau_sd"] = est.tau, est.tau_sd
    lo, hi = est.interval(0.95)
    out["theta_95"] = [lo, hi]
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
    if op == "next_batch":
        session = engine.start(_field(req, "subject"))
        k = _field(req, "k", int)
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"'k' must be a positive integer, got {k!r}")
        reason = session.stop_reason
        if reason is not None and not req.get("force", False):
            return {"items": [], "finished": True, "reason": reason, "estimate": _estimate(session.estimate)}
        try:
            items = session.next_items(k)
        except BankExhaustedError as exc:
            return {"items": [], "finished": True, "reason": str(exc), "estimate": _estimate(session.estimate)}
        return {"items": items, "finished": False, "step": session.n_items + 1}
    if op == "record":
        subject = _field(req, "subject")
        item = _field(req, "item")
        if "correct" not in req:
            raise ValueError("request lacks 'correct'")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            est = engine.record(subject, item, req["correct"], req.get("cot_length"))
        session = engine.session(subject)
        reply = {"estimate": _estimate(est), "finished": session.finished, "reason": session.stop_reason,
                 "proposed": session.history[-1].proposed, "n_unproposed": session.n_unproposed}
        if caught:
            reply["warnings"] = [str(w.message) for w in caught]
        return reply
    if op == "estimate":
        session = engine.session(_field(req, "subject"))
        return {"estimate": _estimate(session.estimate), "finished": session.finished, "reason": session.stop_reason,
                "administered": session.administered, "pending": session.pending_items,
                "n_unproposed": session.n_unproposed}
    if op == "start":
        session = engine.start(_field(req, "subject"))
        return {"estimate": _estimate(session.estimate), "n_items": session.n_items}
    if op == "exclude":
        engine.session(_field(req, "subject")).exclude(_field(req, "item"))
        return {}
    if op == "subjects":
        return {"subjects": sorted(engine.sessions)}
    if op == "info":
        bank = engine.bank
        return {"bank": {"bank_id": str(getattr(bank, "bank_id", "")), "version": int(getattr(bank, "version", 0)),
                         "response_model": engine.items.params.response_model, "n_items": engine.items.n_items},
                "ops": list(OPS)}
    if op == "quit":
        return {"bye": True}
    raise ValueError(f"unknown op {op!r}; use {', '.join(OPS)}")


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
        reply["protocol"] = PROTOCOL_VERSION
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
