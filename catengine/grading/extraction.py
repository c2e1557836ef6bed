"""Reading the final answer out of a response: the last ``\\boxed{...}``, else a final-answer line.

Shared by the graders. Every function here is linear in the length of the text (no regular
expression that can backtrack over the whole response), so a long chain of thought costs no more
than reading it.

* **Boxed.** The last ``\\boxed`` or ``\\fbox`` in the text counts, with its argument in balanced
  braces (``\\{`` and ``\\}`` inside are escaped braces, not delimiters), or, without braces, the
  token that follows (``\\boxed 5``). Boxes joined to it by a comma, "and" or "or" (``\\boxed{-2}
  and \\boxed{1}``, ``$\\boxed{1}$, $\\boxed{3}$``; math delimiters, spacing and ``\\text{ and }``
  may stand between them) are one answer, a list: ``-2, 1`` (as math-verify joins them); a box
  repeated verbatim counts once. A last box whose braces never close (a response cut off by the
  token limit) gives no answer: the reason :data:`UNTERMINATED_BOX`.
* **Final-answer line.** Without a box, the text after the last "answer:", "answer =",
  "answer is", "correct option is" or "correct choice is" (any case: "Final answer: ...", "The
  answer is ...", "**Final Answer:** ...", Minerva's "The final answer is $x$. I hope it is
  correct.") on its line, or on the next line when nothing follows on the same one; a heading line
  that is only "Final Answer" or "Answer" (``**Final Answer**``, ``### Final Answer``) counts as
  such a cue, its answer on the next line. After "Answer:" or a heading, a sentence with a subject
  ("The largest $n$ is 34.", "There are 27 ways.") states its answer after its last "is", "are",
  "equals" or "=". The first math segment (``$...$``, ``\\(...\\)``, ``\\[...\\]``) of that text is
  the answer when there is one; otherwise the text up to the end of its sentence, without markdown
  emphasis.
* **Answer tags.** Before a final-answer line: the text between the last ``<answer>`` and
  ``</answer>`` (DeepSeek-R1-Zero's format), read as above when it holds a cue.
* **GSM8K's marker.** Without any of these, a last line ``#### 42``.
* **Nothing else.** No "last number in the text" guess: without any of these, the reason is
  :data:`NO_FINAL_ANSWER`.

A sentence's full stop after the answer (``\\boxed{5.}``, "The answer is 5.") is not part of it.
"""

from __future__ import annotations

import re

#: unicode superscript digits and signs, and a run of them (``x²``, ``10⁻³``): read as an exponent
SUPERSCRIPTS = dict(zip("\u2070\u00b9\u00b2\u00b3\u2074\u2075\u2076\u2077\u2078\u2079\u207b\u207a", "0123456789-+"))
SUPERSCRIPT_RUN = re.compile("[" + "".join(SUPERSCRIPTS) + "]+")


def superscripts_as_exponent(text: str, braces: bool = False) -> str:
    """``text`` with every run of unicode superscripts written as an exponent: ``x²`` -> ``x^2``
    (``x^{2}`` with ``braces``)."""
    def exponent(m):
        digits = "".join(SUPERSCRIPTS[c] for c in m.group(0))
        return "^{" + digits + "}" if braces else "^" + digits

    return SUPERSCRIPT_RUN.sub(exponent, text)

#: reasons of :func:`final_answer` when it finds no answer
NO_FINAL_ANSWER = "no final answer found"
UNTERMINATED_BOX = "unterminated \\boxed{ (no closing brace: truncated response?)"

_BOX = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
_ANSWER_CUE = re.compile(r"(?<![A-Za-z])(?:answer|(?:correct|right|best)\s{1,3}(?:option|choice))"
                         r"\s{0,3}(?:\*\*|__)?\s{0,3}(?::|=|\bis\b\s{0,3}:?)", re.IGNORECASE)
#: a line that is only a "Final Answer" heading (markdown heading or emphasis, an optional colon)
_HEADING_CUE = re.compile(r"^[ \t]{0,3}(?:#{1,6}[ \t]{0,3})?(?:\*\*|__)?[ \t]{0,3}(?:final[ \t]{1,3})?answer[ \t]{0,3}"
                          r"(?:\*\*|__)?[ \t]{0,3}:?[ \t]{0,3}(?:\*\*|__)?[ \t]*$", re.IGNORECASE | re.MULTILINE)
#: an answer between ``<answer>`` tags (DeepSeek-R1-Zero's and many RL fine-tunes' reply format)
_ANSWER_TAG = re.compile(r"<answer>(.{0,2000}?)</answer>", re.IGNORECASE | re.DOTALL)
#: GSM8K's final line, ``#### 42``
_HASH_ANSWER = re.compile(r"####[ \t]*([-+$\\(\[\d.].*)")
_HOPE = re.compile(r"\s*I hope it is correct.*$", re.IGNORECASE | re.DOTALL)
# (an escaped dollar \$ is a currency sign, not a delimiter)
_MATH_SEGMENT = re.compile(r"(?<!\\)\$\$(.+?)(?<!\\)\$\$|(?<!\\)\$(.+?)(?<!\\)\$|\\\((.+?)\\\)|\\\[(.+?)\\\]", re.DOTALL)
# a sentence ends at ". ", ";" or ", <word>" (not at the dot of a decimal number)
_SENTENCE_END = re.compile(r"\.(?=\s|$)|;|,\s+(?=[A-Za-z]{2,})")
#: in a sentence with a subject after "Answer:" or a heading, the answer follows its last "is", "are",
#: "equals" or "=" (outside math)
_COPULA = re.compile(r"\s(?:is|are|equals)\s|=", re.IGNORECASE)
#: a line that opens with a capitalised word ("The", "There", "Thus"): a sentence with a subject
_SUBJECT = re.compile(r"[A-Z][a-z]+\b")
_EMPHASIS = re.compile(r"^[\s*]+|[\s*]+$")
#: what may stand between two boxes that form one answer: white space, math delimiters, spacing
#: commands, and at least one comma, "and" or "or" (also inside \text{})
_JOIN_GAP = r"(?:\s|\$|\\[()\[\]]|\\[,;:! ]|\\q?quad(?![A-Za-z])|~)*"
_JOIN_WORD = (r"(?:,|(?<![A-Za-z])(?:and|or)(?![A-Za-z])"
              r"|\\(?:text|textrm|mbox|mathrm)\s*\{\s*(?:,\s*(?:and|or)?|and|or)\s*\})")
_JOINER = re.compile(rf"{_JOIN_GAP}(?:{_JOIN_WORD}{_JOIN_GAP})+")
#: the most boxes read as one answer (math-verify joins up to six)
_MAX_JOINED = 6
#: how much of a final-answer line is read (an answer is far shorter; this bounds the patterns' work)
_LINE_CHARS = 2000


def last_boxed(text: str) -> tuple[str | None, bool]:
    """``(argument, found)`` of the last ``\\boxed`` / ``\\fbox`` in ``text``: ``(None, False)`` when
    there is none, ``(None, True)`` when the last one's braces never close."""
    boxes, found = final_boxes(text)
    if not found:
        return None, False
    return (boxes[-1] if boxes else None), True


def final_boxes(text: str) -> tuple[list[str], bool]:
    """``(arguments, found)``: the last box's argument, preceded by those of the boxes joined to it
    (see the module docstring), in order; ``([], True)`` when the last box never closes and
    ``([], False)`` when there is no box."""
    matches = [(match.start(), match.end()) for match in _BOX.finditer(text)]
    if not matches:
        return [], False
    starts_at, starts = [start for start, _ in matches], [end for _, end in matches]
    arguments: list[str] = []
    limit = len(text)
    for k in range(len(starts) - 1, -1, -1):
        argument, end = _box_argument(text, starts[k], limit)
        if argument is None:
            break
        if arguments and not _JOINER.fullmatch(text, end, starts_at[k + 1]):
            break
        arguments.append(argument)
        limit = starts_at[k]
        if len(arguments) == _MAX_JOINED:
            break
    arguments.reverse()
    return arguments, True


def _box_argument(text: str, start: int, limit: int) -> tuple[str | None, int]:
    """``(argument, end)`` of the box whose command ends at ``start``, looking no further than
    ``limit``: the argument in braces or the token after the command; None when it does not close."""
    k = start
    while k < limit and text[k] in " \t":
        k += 1
    if k < limit and text[k] == "{":
        return _balanced(text, k, limit)
    # \boxed x: the token up to white space or a math delimiter
    end = k
    while end < limit and not text[end].isspace() and text[end] != "$":
        end += 1
    token = text[k:end].rstrip(".,;")
    return (token if token else None), end


def _balanced(text: str, open_at: int, limit: int) -> tuple[str | None, int]:
    """``(inside, end)``: the text between the brace at ``open_at`` and its closing brace, and the
    index after that brace (None if it does not close before ``limit``)."""
    depth, k = 0, open_at
    while k < limit:
        char = text[k]
        if char == "\\":
            k += 2  # an escaped character (\{, \}, \\) is never a delimiter
            continue
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return text[open_at + 1:k], k + 1
        k += 1
    return None, limit


def final_answer_line(text: str) -> str | None:
    """The answer stated on the last final-answer line of ``text`` (see the module docstring), or
    None when there is no such line (or nothing follows its cue)."""
    cue = heading = None
    for match in _ANSWER_CUE.finditer(text):
        cue = match
    for match in _HEADING_CUE.finditer(text):
        heading = match
    cues = sorted((match for match in (cue, heading) if match is not None), key=lambda match: match.end())
    for match in reversed(cues):
        subject_first = match is heading or "is" not in match.group(0).lower()
        answer = _answer_after(text[match.end():], subject_first)
        if answer:
            return answer
    return None


def _answer_after(rest: str, subject_first: bool) -> str:
    """The answer stated after a cue: on the rest of its line, else on the next non-empty line. When
    the line may be a sentence with a subject (after "Answer:" or a heading, not after "answer is")
    and is one ("The largest $n$ is 34."), the answer follows its last "is", "are", "equals" or "="."""
    line, _, after = rest.partition("\n")
    if not line.strip():
        following = [part for part in after.split("\n", 3)[:3] if part.strip()]
        line = following[0] if following else ""
    line = _HOPE.sub("", line[:_LINE_CHARS]).strip().lstrip("*_ ")
    if subject_first and _SUBJECT.match(line):
        line = _predicate(line)
    segment = _MATH_SEGMENT.search(line)
    if segment is not None:
        answer = next(group for group in segment.groups() if group is not None)
    else:
        end = _SENTENCE_END.search(line)
        answer = line[:end.start()] if end is not None else line
    return strip_answer(answer, emphasis=True)


def _predicate(line: str) -> str:
    """What follows the last copula ("is", "are", "equals", "=") of ``line``'s first sentence, math
    segments aside (an "=" inside ``$x = 5$`` is not one); ``line`` itself when there is none."""
    masked = _MATH_SEGMENT.sub(lambda m: "\x00" * len(m.group(0)), line)
    end = _SENTENCE_END.search(masked)
    stop = end.start() if end is not None else len(masked)
    copula = None
    for copula in _COPULA.finditer(masked, 0, stop):
        pass
    return line[copula.end():stop].strip() if copula is not None else line


def tagged_answer(text: str) -> str | None:
    """The answer between the last ``<answer>`` and ``</answer>`` (any case): its final-answer line
    when it states one, else its first math segment, else its text; None without such tags."""
    tag = None
    for match in _ANSWER_TAG.finditer(text):
        tag = match
    if tag is None:
        return None
    inside = tag.group(1)
    stated = final_answer_line(inside)
    if stated is not None:
        return stated
    segment = _MATH_SEGMENT.search(inside)
    if segment is not None:
        inside = next(group for group in segment.groups() if group is not None)
    return strip_answer(inside, emphasis=True) or None


def hash_answer(text: str) -> str | None:
    """The answer of a last non-empty line ``#### 42`` (GSM8K's marker), or None."""
    tail = text[-_LINE_CHARS:].rstrip()
    last = tail.rpartition("\n")[2].strip()
    match = _HASH_ANSWER.fullmatch(last)
    return strip_answer(match.group(1), emphasis=True) or None if match else None


def strip_answer(answer: str, emphasis: bool = False) -> str:
    """``answer`` without surrounding white space and a sentence's full stop (``5.``; an ellipsis
    ``...`` stays in a box), and with ``emphasis`` without markdown emphasis (``**5**``) or any
    trailing full stops (the end of a final-answer line)."""
    if emphasis:
        return _EMPHASIS.sub("", _EMPHASIS.sub("", answer).rstrip("."))
    answer = answer.strip()
    if answer.endswith(".") and not answer.endswith(".."):
        answer = answer[:-1].rstrip()
    return answer


def final_answer(text: str) -> tuple[str | None, str]:
    """``(answer, "")`` read from ``text`` (the last box with those joined to it, else ``<answer>``
    tags, else a final-answer line, else GSM8K's ``#### ...``), or ``(None, reason)``: :data:`UNTERMINATED_BOX` or
    :data:`NO_FINAL_ANSWER`. An empty box gives ``("", "")``."""
    boxes, found = final_boxes(text)
    if found:
        if not boxes:
            return None, UNTERMINATED_BOX
        return ", ".join(dict.fromkeys(strip_answer(box) for box in boxes)), ""
    line = tagged_answer(text)
    if line is None:
        line = final_answer_line(text)
    if line is None:
        line = hash_answer(text)
    if line is None:
        return None, NO_FINAL_ANSWER
    return line, ""
