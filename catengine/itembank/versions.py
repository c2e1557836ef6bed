"""Where bank versions live on disk: ``<directory>/<bank_id>_v<N>.nc``, one file per version.

Shared by the reader/writer (``io.py``) and the shipped-bank lookup (``shipped.py``).
"""

from __future__ import annotations

import re
from pathlib import Path

from catengine.errors import ItemBankSchemaError

_VERSION_FILE = re.compile(r"^(?P<bank_id>.+)_v(?P<version>[1-9][0-9]*)\.nc$")


def list_versions(directory) -> dict[int, Path]:
    """Map version number -> file of every bank version stored in ``directory``."""
    directory = Path(directory)
    if not directory.is_dir():
        return {}
    versions = {}
    for path in directory.iterdir():
        match = _VERSION_FILE.match(path.name)
        if match and path.is_file():
            version = int(match["version"])
            if version in versions:
                raise ItemBankSchemaError(
                    str(directory), [f"two files claim version {version}: {versions[version].name}, {path.name}"]
                )
            versions[version] = path
    return dict(sorted(versions.items()))
