"""Citations of the mathematics in code and tests point at the repository's own documentation.

A reader of the repository can follow ``docs/math.md §N.M``: every such citation in tests/,
calibration/, catengine/ and benchmarks/ must name a section heading of docs/math.md, and no file
there may cite the project's internal specifications (the spec files named in ``INTERNAL_SPECS``,
which are not part of the repository).
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MATH_DOC = ROOT / "docs" / "math.md"
SCANNED = ("tests", "calibration", "catengine", "benchmarks")
TEXT_SUFFIXES = {".py", ".md", ".txt", ".toml", ".cfg", ".ini", ".json", ".jsonl", ".csv", ".yml", ".yaml"}

#: upper-case spec names (docs/math.md itself is lower case); built from parts so this file names none
INTERNAL_SPECS = tuple(name + ".md" for name in ("MATH", "DESIGN"))
_SPEC_CITATION = re.compile(r"(?<!\w)(?:" + "|".join(re.escape(n) for n in INTERNAL_SPECS) + r")\b")

_SECTION = r"\d+(?:\.\d+)*"
# "docs/math.md §1.3", also wrapped over a comment line, and further sections: "-7.5", ", §7.4", "/ §2"
_MATH_CITATION = re.compile(
    r"docs/math\.md[\s#]*§(?P<first>" + _SECTION + r")"
    r"(?P<more>(?:\s*(?:-|–|,|/)\s*§?" + _SECTION + r"(?![\w.]*\w))*)"
)
_HEADING = re.compile(r"^#+\s+§(" + _SECTION + r")\s", re.MULTILINE)


def _scanned_files():
    for top in SCANNED:
        for path in sorted((ROOT / top).rglob("*")):
            if path.is_file() and path.suffix in TEXT_SUFFIXES and "__pycache__" not in path.parts:
                yield path


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")


def _line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def _math_sections() -> set[str]:
    return set(_HEADING.findall(_read(MATH_DOC)))


def _cited_sections(match: re.Match) -> list[str]:
    cited = [match.group("first")]
    cited += re.findall(_SECTION, match.group("more"))
    return cited


def test_math_doc_has_numbered_sections():
    sections = _math_sections()
    assert {"1", "1.3", "2.2", "5.1", "7.5"} <= sections, sorted(sections)


def test_no_file_cites_the_internal_specifications():
    found = []
    for path in _scanned_files():
        text = _read(path)
        for m in _SPEC_CITATION.finditer(text):
            found.append(f"{path.relative_to(ROOT)}:{_line_of(text, m.start())}: {m.group(0)}")
    assert not found, (
        "cite the repository's docs/math.md section instead of the internal specifications:\n" + "\n".join(found)
    )


def test_every_math_doc_citation_names_an_existing_section():
    sections = _math_sections()
    n_citations = 0
    missing = []
    for path in _scanned_files():
        text = _read(path)
        for m in _MATH_CITATION.finditer(text):
            n_citations += 1
            for section in _cited_sections(m):
                if section not in sections:
                    missing.append(f"{path.relative_to(ROOT)}:{_line_of(text, m.start())}: §{section} "
                                   f"(in {m.group(0)!r})")
    assert n_citations > 50, f"only {n_citations} docs/math.md citations found: is the pattern still right?"
    assert not missing, f"docs/math.md has no such section heading:\n" + "\n".join(missing)


def test_the_citation_patterns():
    cites = [_cited_sections(m) for m in _MATH_CITATION.finditer(
        "docs/math.md §1.3; docs/math.md §7.3-7.5): x; docs/math.md §5.1, §7.4; (docs/math.md\n    # §1.5)"
        "; docs/math.md §4, Jiang et al. 2026; docs/math.md §7.1, ``docs/calibration_priors.md``")]
    assert cites == [["1.3"], ["7.3", "7.5"], ["5.1", "7.4"], ["1.5"], ["4"], ["7.1"]]
    spec = INTERNAL_SPECS[0]
    assert _SPEC_CITATION.search(f"see {spec} 1.3") and _SPEC_CITATION.search(f"../shared/spec/{spec}")
    assert not _SPEC_CITATION.search("docs/math.md §1.3") and not _SPEC_CITATION.search("test_math_md_example")


#: the source papers are cited by author and year (docs/math.md lists them), never by the numbers of
#: the project's internal copies of them; built from parts so this file names none
_INTERNAL_PAPER_LABEL = re.compile("se" + r"ed\s+00\d")


def test_papers_are_cited_by_author_and_year():
    found = []
    for path in [*_scanned_files(), *sorted((ROOT / "docs").rglob("*.md")), *sorted((ROOT / "notebooks").glob("*.ipynb")),
                 ROOT / "README.md"]:
        text = _read(path)
        found += [f"{path.relative_to(ROOT)}:{_line_of(text, m.start())}" for m in _INTERNAL_PAPER_LABEL.finditer(text)]
    assert not found, found
    math_doc = _read(MATH_DOC)
    for citation in ("Xu et al. 2025", "Qu et al. 2026", "the Laplace-PSN-IRT paper (2026)", "Jiang et al. 2026"):
        assert citation in math_doc.split("## §0")[0], citation  # the list of sources says what each one is
