"""The JSON-lines protocol of ``catengine serve`` (protocol version 1): one request object per line
on stdin, one reply object per line on stdout, in order.

Every reply carries ``"ok"`` (true / false) and ``"protocol": 1``; a request's ``"id"`` (any JSON
value), if given, is echoed back. Replies may gain fields in later versions: ignore unknown ones.
The JSON Schema of every reply ships with the package (``catengine/session/serve_protocol.schema.json``,
``catengine.session.serve.protocol_schema()``); docs/serve_protocol.md has examples.

Requests and their replies (S: subject id, a non-empty string of at most 1,000 characters; ID: item
id of the bank, at most 1,000 characters; E: an
estimate {"theta", "theta_sd", "n_items", "theta_95": [lo, hi], "tau", "tau_sd" for LaRT banks, and
"interval_calibration", how the SDs were widened, when they were}):

  {"op": "next", "subject": S[, "force": true]}
      -> {"item": ID, "finished": false, "step": n}            the item to administer (the same until answered)
      -> {"item": null, "finished": true, "reason": R, "estimate": E}   the test may stop
  {"op": "next_batch", "subject": S, "k": K[, "force": true]}
      -> {"items": [ID, ...], "finished": false, "step": n}    up to K items chosen jointly, to run in
         parallel and answer in any order; until all are answered (or excluded) it returns the rest
      -> {"items": [], "finished": true, "reason": R, "estimate": E}
  {"op": "record", "subject": S, "item": ID, "correct": 0|1[, "cot_length": tokens|null]}
      -> {"estimate": E, "finished": bool, "reason": R|null, "proposed": bool, "n_unproposed": n,
          "score": SC[, "design_score": SC][, "warnings": [text, ...]][, "failed": {"score": text}]}
  {"op": "estimate", "subject": S}
      -> {"estimate": E, "finished": bool, "reason": R|null, "administered": [ID, ...], "pending": [ID, ...],
          "n_unproposed": n, "person_fit": {"lz", "n_items", "flagged", "message"}, "score": SC[, "design_score": SC]}
  {"op": "start", "subject": S}       -> {"estimate": E, "n_items": n}
  {"op": "exclude", "subject": S, "item": ID}   -> {}      (the item is never proposed to S)
  {"op": "subjects"}                  -> {"subjects": [S, ...]}
  {"op": "info"}                      -> {"bank": {"bank_id", "version", "response_model", "n_items"}, "ops": [...]}
  {"op": "quit"}                      -> {"bye": true}, then the server exits

SC is the predicted full-benchmark score (ScoreEstimate.to_dict): accuracy over every item of the
bank with its 95% interval, CoT tokens for LaRT banks, and per-category results; "design_score"
is the design-based estimate, present for sessions run with the ``randomised`` selector.
"proposed" is false when the answered item was not the one the engine proposed (allowed, but the
test is then less adaptive; "n_unproposed" counts such answers); the proposal stays pending. A
``record`` either fails and changes nothing, or records the answer (in the log too) and succeeds:
should its score then fail to compute, the reply has no "score" and "failed": {"score": text} says
why (``estimate`` replies likewise); the subject's next requests work as before.

``next`` / ``next_batch`` start the subject's session when it is new; once the stopping rule is met
they answer finished (send ``"force": true`` to get items anyway). Any failure is answered as
{"ok": false, "protocol": 1, "error": NAME, "message": TEXT} and the server keeps going. NAME is
one of the protocol's error names: MalformedJSON (not JSON, not UTF-8, nested too deeply),
InvalidRequestError (not an object, a missing or mistyped field, an unknown op, a bad value), the
library's own errors (UnknownSubjectError, UnknownItemError, ItemAlreadyAnsweredError,
InvalidResponseError, CoTOutOfRangeError, BankExhaustedError, SessionLogError, ...), or
InternalError for anything else (a bug: the message says what happened). A message quotes at most
the first 40 characters of a long value from the request, and is at most 1,000 characters long.
End of input (closed stdin) ends the server cleanly. With ``--log`` every proposal and answer is in the
session log, and restarting the server on the same log resumes every session (pending items and
half-answered batches included).
"""

from __future__ import annotations

import json
import math
import sys
import warnings

from catengine.errors import BankExhaustedError, CatEngineError
from catengine.session._ids import checked_id
from catengine.session.engine import Engine

PROTOCOL_HELP = __doc__
#: version of the serve protocol, sent in every reply as ``"protocol"``
PROTOCOL_VERSION = 1
SCHEMA_FILE = "serve_protocol.schema.json"
OPS = ("next", "next_batch", "record", "estimate", "start", "exclude", "subjects", "info", "quit")
#: the longest error message sent, in characters (longer ones are cut, saying so)
MAX_MESSAGE_LENGTH = 1000
#: a string of the request longer than this is quoted in error messages by its first ``QUOTED_PREFIX`` characters
QUOTED_PREFIX = 40


def protocol_schema() -> dict:
    """The JSON Schema (draft 2020-12) of every reply of the protocol (shipped package data)."""
    from importlib.resources import files

    return json.loads(files("catengine.session").joinpath(SCHEMA_FILE).read_text(encoding="utf-8"))


class InvalidRequestError(CatEngineError, ValueError):
    """A request that is not an object, lacks a field, has a field of the wrong type, or an unknown op."""


def _long_strings(value, out: list, depth: int = 0) -> list:
    """The strings longer than ``QUOTED_PREFIX`` characters in a request's values (a few levels deep)."""
    if isinstance(value, str):
        if len(value) > QUOTED_PREFIX:
            out.append(value)
    elif depth < 3 and isinstance(value, dict):
        for v in value.values():
            _long_strings(v, out, depth + 1)
    elif depth < 3 and isinstance(value, (list, tuple)):
        for v in value[:100]:
            _long_strings(v, out, depth + 1)
    return out


def _shortened(message: str, req) -> str:
    """``message`` with every long string of the request ``req`` it quotes replaced by its first
    ``QUOTED_PREFIX`` characters (and its length), cut at ``MAX_MESSAGE_LENGTH`` characters."""
    if isinstance(req, dict):
        for value in sorted(_long_strings(req, []), key=len, reverse=True):
            short = f"{value[:QUOTED_PREFIX]!r}... ({len(value):,} characters)"
            message = message.replace(repr(value), short).replace(value, short)
    if len(message) > MAX_MESSAGE_LENGTH:
        message = message[:MAX_MESSAGE_LENGTH] + f"... (message cut: {len(message):,} characters)"
    return message


def _error_reply(exc: BaseException, req=None) -> dict:
    """The named protocol error for any exception a request ``req`` raised (long values of the
    request are quoted by a short prefix: :func:`_shortened`)."""
    if isinstance(exc, CatEngineError):
        message = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
        return {"ok": False, "error": type(exc).__name__, "message": _shortened(message, req)}
    if isinstance(exc, (ValueError, TypeError, KeyError, OverflowError, UnicodeError)):
        message = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
        return {"ok": False, "error": "InvalidRequestError",
                "message": _shortened(f"{type(exc).__name__}: {message}", req)}
    return {"ok": False, "error": "InternalError",
            "message": _shortened(f"internal error ({type(exc).__name__}): {exc}", req)}


def _encode_reply(reply: dict) -> str:
    """One reply line; a reply that cannot be encoded (an echoed id nested too deeply) is replaced by an error."""
    try:
        return json.dumps(_finite_json(reply))
    except (RecursionError, ValueError, TypeError) as exc:
        return json.dumps({"ok": False, "protocol": PROTOCOL_VERSION, "error": "InvalidRequestError",
                           "message": f"the reply cannot be encoded ({type(exc).__name__}); is the request id nested too deeply?"})


def _estimate(est) -> dict:
    out = {"theta": est.theta, "theta_sd": est.theta_sd, "n_items": est.n_items}
    if est.tau is not None:
        out["tau"], out["tau_sd"] = est.tau, est.tau_sd
    lo, hi = est.interval(0.95)
    out["theta_95"] = [lo, hi]
    if est.interval_calibration:
        out["interval_calibration"] = est.interval_calibration
    return out


def _scores(session, record: bool) -> dict:
    """The ``score`` (``predicted_score()``: the design-based estimate whenever the draws allow it, else
    the model's) and, when it is the design-based one, the same as ``design_score``. A score that
    cannot be computed (or, with ``record``, logged) is no reason to fail a request whose answer is
    already recorded: the reply then says so in ``failed``."""
    try:
        score = session.predicted_score(record=record).to_dict()
    except Exception as exc:  # noqa: BLE001 - reported in the reply; the session stays usable
        return {"failed": {"score": f"{type(exc).__name__}: {str(exc)[:300]}"}}
    return {"score": score, "design_score": score} if score["method"] == "design" else {"score": score}


def _field(req: dict, name: str, kind=str):
    """The request's field ``name``; a string field is an id (``subject``, ``item``), checked by
    :func:`~catengine.session._ids.checked_id`."""
    if name not in req:
        raise InvalidRequestError(f"request lacks {name!r}")
    value = req[name]
    if kind is str and not isinstance(value, str):
        raise InvalidRequestError(f"{name!r} must be a string, got {type(value).__name__} {json.dumps(value)[:80]}")
    if kind is str:
        checked_id(value, name, InvalidRequestError)
    return value


def _force(req: dict) -> bool:
    """The optional ``force`` flag: true or false (a JSON boolean), false when absent."""
    value = req.get("force", False)
    if not isinstance(value, bool):
        raise InvalidRequestError(f"'force' must be true or false, got {type(value).__name__} {json.dumps(value)[:80]}")
    return value


def handle(engine: Engine, req) -> dict:
    """Answer one parsed request (never raises for bad requests: the reply says what was wrong)."""
    if not isinstance(req, dict):
        raise InvalidRequestError(f"a request is a JSON object, got {type(req).__name__}")
    if "op" not in req:
        raise InvalidRequestError(f"request lacks 'op'; use {', '.join(OPS)}")
    op = req.get("op")
    if op == "next":
        session = engine.start(_field(req, "subject"))
        reason = session.stop_reason
        if not _force(req) and reason is not None:
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
        if not _force(req) and reason is not None:
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
            raise InvalidRequestError("request lacks 'correct'")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            est = engine.record(subject, item, req["correct"], req.get("cot_length"))
            # the answer is recorded: what follows never fails the request (a score that cannot be
            # computed is named in "failed"; the stopping rule takes it as unknown)
            session = engine.session(subject)
            reply = {"estimate": _estimate(est), "finished": session.finished, "reason": session.stop_reason,
                     "proposed": session.history[-1].proposed, "n_unproposed": session.n_unproposed,
                     **_scores(session, record=True)}
        if caught:
            reply["warnings"] = [str(w.message) for w in caught]
        return reply
    if op == "estimate":
        session = engine.session(_field(req, "subject"))
        return {"estimate": _estimate(session.estimate), "finished": session.finished, "reason": session.stop_reason,
                "administered": session.administered, "pending": session.pending_items,
                "n_unproposed": session.n_unproposed, "person_fit": session.person_fit().to_dict(),
                **_scores(session, record=False)}
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
    raise InvalidRequestError(f"unknown op {str(op)[:80]!r}; use {', '.join(OPS)}")


def _finite_json(obj):
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite_json(v) for v in obj]
    return obj


class _Undecodable(str):
    """A request line whose bytes are not UTF-8 (its text is the decoding error)."""


def _read_request_line(stdin) -> str:
    """The next request line; read as bytes when the stream has them, so that a line that is not
    UTF-8 becomes one MalformedJSON reply instead of ending the server."""
    buffer = getattr(stdin, "buffer", None)
    if buffer is None:
        return stdin.readline()
    raw = buffer.readline()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return _Undecodable(f"request is not UTF-8 ({exc})")


def serve(engine: Engine, stdin=None, stdout=None) -> int:
    """Run the protocol until end of input or ``quit``. Returns the exit status (0)."""
    stdin = sys.stdin if stdin is None else stdin
    stdout = sys.stdout if stdout is None else stdout
    while True:
        try:
            line = _read_request_line(stdin)
        except (KeyboardInterrupt, OSError, ValueError):
            break
        if not line:
            break  # closed stdin
        if not isinstance(line, _Undecodable):  # strip() would turn the marker into a plain str
            line = line.strip()
        if not line:
            continue
        reply: dict
        req = None
        try:
            if isinstance(line, _Undecodable):
                raise ValueError(str(line))
            req = json.loads(line)
        except (ValueError, RecursionError) as exc:  # also integers beyond 4300 digits, nesting beyond the stack
            reply = {"ok": False, "error": "MalformedJSON", "message": f"request is not valid JSON ({type(exc).__name__}: {exc})"}
        else:
            try:
                reply = {"ok": True, **handle(engine, req)}
            except Exception as exc:  # noqa: BLE001 - the server must survive anything a request triggers
                reply = _error_reply(exc, req)
        reply["protocol"] = PROTOCOL_VERSION
        if isinstance(req, dict) and "id" in req:
            reply["id"] = req["id"]
        try:
            stdout.write(_encode_reply(reply) + "\n")
            stdout.flush()
        except (BrokenPipeError, OSError, ValueError):
            break
        if isinstance(req, dict) and req.get("op") == "quit" and reply.get("ok"):
            break
    engine.close()
    return 0
