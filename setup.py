"""Build hook (all metadata lives in pyproject.toml): ship the repository's ``item_banks/`` in the
wheel as package data, ``catengine/item_banks/<bank_id>/{<bank_id>_v<N>.nc, LICENSE}``, so that
``pip install .`` users have the shipped banks (``catengine banks``, ``open_item_bank("math500_lart")``).
Editable installs and checkouts read ``item_banks/`` in place (``catengine.itembank.shipped``).
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

BANKS = Path(__file__).resolve().parent / "item_banks"


class BuildPyWithBanks(build_py):
    def run(self):
        super().run()
        target = Path(self.build_lib) / "catengine" / "item_banks"
        for path in sorted(BANKS.glob("*/*")):
            if path.is_file() and (path.suffix == ".nc" or path.name == "LICENSE"):
                out = target / path.parent.name / path.name
                out.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, out)


setup(cmdclass={"build_py": BuildPyWithBanks})
