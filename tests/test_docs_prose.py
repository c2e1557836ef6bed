"""The README and the docs/ pages describe the library as it is: no development history in their
prose (that is what git log is for), and a README short enough to read as a user guide."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

#: phrases that tell the story of the code instead of stating what it does (case-insensitive regexes)
HISTORY = [
    r"\bsession \d+\b",                                     # "re-measured in session 10"
    r"\b(earlier|previous|prior|first|last) (release|build)s?\b",
    r"\bearlier (version|form)s\b",
    r"\bprevious build'?s?\b",
    r"\bthis (build|release)\b",
    r"\bre-?measured\b",
    r"\bsince v\d+\b",
    r"\b(from|until|before|after) v\d+\b",
    r"\bv\d+ (refits|changes|adds|today)\b",
    r"\bused to\b",
    r"\bno longer\b",
    r"\bformerly\b",
    r"\bwas (changed|raised|lowered|replaced)\b",
    r"\bonce fixed\b",
    r"\b(bug|problem|mistake|error) was fixed\b",
    r"\bwere (fixed|changed)\b",
    r"\bnow (defaults?|uses|holds|splits|finds|has|is|are)\b",
    r"\b(the|its) old (rule|default|audit)\b",
    r"\bpre-change\b",
    r"\bas before\b",
    r"\blater raised\b",
    r"\buntil session\b",
    r"\bbranch \w*\d\b",                                    # "that is branch honest13"
]
_HISTORY = re.compile("|".join(f"(?:{p})" for p in HISTORY), flags=re.I)


def _prose(path: Path) -> list[tuple[int, str]]:
    """(line number, line) of the page outside fenced code blocks."""
    lines, fenced = [], False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced:
            lines.append((number, line))
    return lines


@pytest.mark.parametrize("path", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_development_history_in_the_prose(path):
    hits = [f"{path.relative_to(ROOT)}:{n}: {m.group(0)!r} in {line.strip()[:120]!r}"
            for n, line in _prose(path) for m in _HISTORY.finditer(line)]
    assert not hits, "state the current behaviour instead of its history:\n" + "\n".join(hits)


def test_the_phrase_list_catches_history():
    for sentence in ("re-measured in session 10", "Earlier releases reported 0.62x", "the previous build's default",
                     "since v5 the banks", "the CLI used to stop on theta", "the bug was fixed", "it no longer chases",
                     "this release holds runs out"):
        assert _HISTORY.search(sentence), sentence
    for sentence in ("the previous version of the bank", "the session's previous estimate", "no item left",
                     "a new version is written", "once the LLM stands beyond"):
        assert not _HISTORY.search(sentence), sentence


def test_readme_is_a_short_user_guide():
    n = len((ROOT / "README.md").read_text(encoding="utf-8").splitlines())
    assert n <= 170, f"README.md has {n} lines (at most 170; measurements belong in docs/validation.md)"
