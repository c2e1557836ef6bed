"""Reading the final answer out of a response: the last ``\\boxed{...}``, else a final-answer line.

Shared by the math and integer graders. Every function here is linear in the length of the text
(no regular expression that can backtrack over the whole response), so a long chain of thought costs
no more than reading it.

* **Boxed.** The last ``\\boxed`` or ``\\fbox`` in the text counts, with its argument in balanced
  braces (``\\{`` and ``\\}`` inside are escaped braces, not delimiters), or, without braces, the
  token that follows (``\\boxed 5``). A last box whose braces never close (a response cut off by
  the token limit) gives no answer: the reason :data:`UNTERMINATED_BOX`.
* **Final-answer line.** Without a box, the text after the last "answer:", "answer =" or
  "answer is" (any case: "Final answer: ...", "The answer is ...", "**Final Answer:** ...",
  Minerva's "The final answer is $x$. I hope it is correct.") on its line, or on the next line
  when nothing follows on the same one. The first math segment (``$...$``, ``\\(...\\)``,
  ``\\[...\\]``) of that text is the answer when there is one; otherwise the text up to the end of
  its sentence.
* **Nothing else.** No "last number in the text" guess: without either, the reason is
  :data:`NO_FINAL_ANSWER`.
"""

from __future__ import annotations

import re

#: reasons of :func:`final_answer` when it finds no answer
NO_FINAL_ANSWER = "no final answer found"
UNTERMINATED_BOX = "unterminated \\boxed{ (no closing brace: truncated response?)"

_BOX = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
_ANSWER_CUE = re.compile(r"(?<![A-Za-z])answer\s{0,3}(?:\*\*|__)?\s{0,3}(?::|=|\bis\b\s{0,3}:?)", re.IGNORECASE)
_HOPE = re.compile(r"\s*I hope it is correct.*$", re.IGNORECASE | re.DOTALL)
# (an escaped dollar \$ is a currency sign, not a delimiter)
_MATH_SEGMENT = re.compile(r"(?<!\\)\$\$(.+?)(?<!\\)\$\$|(?<!\\)\$(.+?)(?<!\\)\$|\\\((.+?)\\\)|\\\[(.+?)\\\]", re.DOTALL)
# a sentence ends at ". ", ";" or ", <word>" (not at the dot of a decimal number)
_SENTENCE_END = re.compile(r"\.(?=\s|$)|;|,\s+(?=[A-Za-z]{2,})")
#: how much of a final-answer line is read (an answer is far shorter; this bounds the patterns' work)
_LINE_CHARS = 2000


def last_boxed(text: str) -> tuple[str | None, bool]:
    """``(argument, found)`` of the last ``\\boxed`` / ``\\fbox`` in ``text``: ``(None, False)`` when
    there is none, ``(None, True)`` when the last one's braces never close."""
    start = None
    for match in _BOX.finditer(text):
        start = match.end()
    if start is None:
        return None, False
    k = start
    while k < len(text) and text[k] in " \t":
        k += 1
    if k < len(text) and text[k] == "{":
        return _balanced(text, k), True
    # \boxed x: the token up to white space or a math delimiter
    end = k
    while end < len(text) and not text[end].isspace() and text[end] != "$":
        end += 1
    token = text[k:end].rstrip(".,;")
    return (token if token else None), True


def _balanced(text: str, open_at: int) -> str | None:
    """The text between the brace at ``open_at`` and its closing brace (None if it never closes)."""
    depth, k = 0, open_at
    while k < len(text):
        char = text[k]
        if char == "\\":
            k += 2  # an escaped character (\{, \}, \\) is never a delimiter
            continue
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return text[open_at + 1:k]
        k += 1
    return None


def final_answer_line(text: str) -> str | None:
    """The answer stated on the last final-answer line of ``text`` (see the module docstring), or
    None when there is no such line (or nothing follows its cue)."""
    cue = None
    for match in _ANSWER_CUE.finditer(text):
        cue = match
    if cue is None:
        return None
    rest = text[cue.end():]
    line, _, after = rest.partition("\n")
    if not line.strip():
        following = [part for part in after.split("\n", 3)[:3] if part.strip()]
        line = following[0] if following else ""
    line = _HOPE.sub("", line[:_LINE_CHARS]).strip()
    segment = _MATH_SEGMENT.search(line)
    if segment is not None:
        answer = next(group for group in segment.groups() if group is not None)
    else:
        end = _SENTENCE_END.search(line)
        answer = line[:end.start()] if end is not None else line
    answer = answer.strip().strip("*").strip()
    answer = answer.rstrip(".").strip()
    return answer or None


def final_answer(text: str) -> tuple[str | None, str]:
    """``(answer, "")`` read from ``text`` (the last box, else a final-answer line), or
    ``(None, reason)``: :data:`UNTERMINATED_BOX` or :data:`NO_FINAL_ANSWER`. An empty box gives
    ``("", "")``."""
    boxed, found = last_boxed(text)
    if found:
        if boxed is None:
            return None, UNTERMINATED_BOX
        return boxed.strip(), ""
    line = final_answer_line(text)
    if line is None:
        return None, NO_FINAL_ANSWER
    return line, ""
