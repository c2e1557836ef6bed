"""``Engine``: many subjects (LLMs) tested at once against one bank, one shared session log."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from catengine.validation import is_integer
from catengine.session.bank_log import (
    attach_writer,
    item_table,
    lock_for_resume,
    make_header,
    read_for_resume,
    replay_events,
)
from catengine.session._ids import checked_id
from catengine.session.errors import UnknownSubjectError
from catengine.session.log import LogWriter
from catengine.session.session import CATSession


def _subject_key(subject: str) -> int:
    return int.from_bytes(hashlib.sha256(subject.encode("utf-8")).digest()[:8], "little")


class Engine:
    """Keeps one :class:`CATSession` per subject id and routes each request to it.

    All sessions share the bank, the strategies (``selector``, ``estimator``, ``stopping``,
    ``exposure``, as for ``CATSession``) and, with ``log=path``, one append-only JSONL log.
    ``rng`` (int | Generator | SeedSequence | None) seeds the engine; each subject's generator is
    derived from its entropy and the subject id, so a subject's draws do not depend on the order
    subjects arrive in (a log records the entropy; :meth:`resume` passes it back as a SeedSequence).
    """

    def __init__(self, bank, *, selector=None, estimator=None, stopping=None, exposure=(), rng=None,
                 log=None, fsync: bool = False):
        self.bank = bank
        self.items = item_table(bank)
        self._strategies = {"selector": selector, "estimator": estimator, "stopping": stopping, "exposure": exposure}
        if isinstance(rng, np.random.SeedSequence):
            entropy = int(rng.entropy)
        elif isinstance(rng, np.random.Generator):
            entropy = int(rng.integers(2**63))
        elif rng is None or is_integer(rng):
            entropy = int(np.random.SeedSequence(rng).entropy)
        else:
            raise TypeError(f"rng must be a numpy Generator, SeedSequence, an int seed or None, got {type(rng).__name__}")
        self._entropy = entropy
        self.sessions: dict[str, CATSession] = {}
        # a throwaway session validates the strategies against the bank and resolves the defaults
        probe = CATSession.sharing(self.items, bank, **self._strategies)
        self._strategies = {"selector": probe.selector, "estimator": probe.estimator, "stopping": probe.stopping,
                            "exposure": probe.exposure}
        self._config = probe.config()
        self._writer = None
        if log is not None:
            self._writer = LogWriter(log, fsync=fsync)
            self._writer.write(make_header(bank, self.items, self._config, seed_entropy=self._entropy))

    def config(self) -> dict:
        return self._config

    def _subject_rng(self, subject: str) -> np.random.Generator:
        return np.random.default_rng(np.random.SeedSequence(self._entropy, spawn_key=(_subject_key(subject),)))

    @staticmethod
    def _check_subject(subject) -> str:
        """A subject id: a non-empty string of valid Unicode, at most ``MAX_ID_LENGTH`` (1,000) characters."""
        if not isinstance(subject, str) or not subject:
            raise UnknownSubjectError(f"subject ids are non-empty strings, got {str(subject)[:80]!r}")
        return checked_id(subject, "subject", UnknownSubjectError)

    # ------------------------------------------------------------------ routing
    def start(self, subject: str) -> CATSession:
        """The session of ``subject``, created (and logged) if new."""
        subject = self._check_subject(subject)
        session = self.sessions.get(subject)
        if session is None:
            session = CATSession.sharing(self.items, self.bank, writer=self._writer, subject=subject,
                                         rng=self._subject_rng(subject), **self._strategies)
            self.sessions[subject] = session
        return session

    def session(self, subject: str) -> CATSession:
        """The existing session of ``subject`` (UnknownSubjectError if there is none)."""
        try:
            return self.sessions[subject]
        except (KeyError, TypeError):
            text = str(subject)
            shown = repr(subject) if len(text) <= 80 else f"{text[:40]!r}... ({len(text):,} characters)"
            raise UnknownSubjectError(
                f"unknown subject {shown}: start its session first (next_item or start); "
                f"{len(self.sessions)} subject(s) known"
            ) from None

    def next_item(self, subject: str) -> str:
        """Next item for ``subject`` (starts its session if new)."""
        return self.start(subject).next_item()

    def next_items(self, subject: str, k: int) -> list[str]:
        """Next ``k`` items for ``subject``, chosen jointly (see :meth:`CATSession.next_items`)."""
        return self.start(subject).next_items(k)

    def record(self, subject: str, item_id, correct, cot_length=None):
        """Route an answer to the session of ``subject``; returns its new estimate."""
        return self.session(subject).record(item_id, correct, cot_length)

    def estimate(self, subject: str):
        return self.session(subject).estimate

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ------------------------------------------------------------------ resume
    @classmethod
    def resume(cls, log, bank=None, *, fsync: bool = False) -> "Engine":
        """Rebuild every session of a log exactly (answers, estimates, pending proposals, random
        generator states) and keep appending to it. ``bank`` defaults to the file named in the log."""
        writer = lock_for_resume(log, fsync)
        try:
            contents, bank, strategies = read_for_resume(log, bank)
            entropy = contents.header.get("seed_entropy")
            engine = cls(bank, rng=None if entropy is None else np.random.SeedSequence(int(entropy)), **strategies)
            engine.sessions.update(replay_events(
                log, contents,
                lambda subject, rng: CATSession.sharing(engine.items, bank, subject=subject, rng=rng, **engine._strategies),
            ))
            engine._writer = attach_writer(writer, engine.sessions.values())
        except BaseException:
            writer.close()
            raise
        return engine
