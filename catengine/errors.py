"""Exception hierarchy shared by the online engine and the calibration package."""


class CatEngineError(Exception):
    """Base class of every exception raised deliberately by this library."""


class ItemBankSchemaError(CatEngineError, ValueError):
    """An item bank file or dataset does not follow schema v1.

    ``problems`` lists every problem found, so one error reports all of them.
    """

    def __init__(self, source: str, problems: list[str]):
        self.source = source
        self.problems = list(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"invalid item bank {source}: {len(self.problems)} problem(s)\n{lines}")


class ItemBankVersionExistsError(CatEngineError, FileExistsError):
    """Raised instead of overwriting an item bank version that is already on disk."""


class BankExhaustedError(CatEngineError):
    """No eligible item is left to administer."""


class ResponseFileError(CatEngineError, ValueError):
    """An input (response) file that cannot be read: names the file and, where known, the line,
    the column and the offending value (attributes ``file``, ``line``, ``column``, ``value``)."""

    def __init__(self, message: str, *, file=None, line=None, column=None, value=None):
        self.file, self.line, self.column, self.value = file, line, column, value
        super().__init__(message)


class BankChecksumWarning(UserWarning):
    """A bank file records no content checksum, so damage to its parameters cannot be detected
    (``catengine banks upgrade`` writes a checksummed version)."""
