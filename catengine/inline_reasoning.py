"""Reasoning a model writes inline before its answer (``<think> ... </think> answer``): where it ends
and the answer begins. Plain text, shared by the model clients (which keep the reasoning apart from
the answer) and the graders (which grade the answer alone, whatever text they are handed).
"""

from __future__ import annotations

from typing import Literal

#: (opening, closing) tags of reasoning written inline in a reply's content: DeepSeek-R1, QwQ, Qwen3 and
#: most open reasoning models (``<think>``), Seed-OSS, Magistral (``[THINK]``), Kimi (``◁think▷``)
THINK_TAGS = (("<think>", "</think>"), ("<thinking>", "</thinking>"), ("<seed:think>", "</seed:think>"),
              ("[THINK]", "[/THINK]"), ("\u25c1think\u25b7", "\u25c1/think\u25b7"))

#: how a client reads reasoning inline in the content (see :func:`split_inline_reasoning`)
InlineReasoning = Literal["auto", "opened", "off"]


def split_inline_reasoning(content: str, mode: InlineReasoning = "auto") -> tuple[str, str | None]:
    """``(final text, reasoning)`` of a reply whose reasoning may be inline in its content.

    ``mode="auto"``: a reply that begins with an opening tag (:data:`THINK_TAGS`, after whitespace)
    has its reasoning up to the matching closing tag and its final text after it; without the closing
    tag it stopped inside its reasoning and has no final text (""). A reply that does not begin with
    an opening tag but holds a closing tag (the chat template wrote the opening one, as DeepSeek-R1's
    does) has its reasoning before the first closing tag. Any other content is all final text.
    ``mode="opened"``: the chat template opens the reasoning, so a reply without a closing tag is all
    unfinished reasoning (for a model whose template always does, e.g. the DeepSeek-R1 distills served
    without a reasoning parser: a reply cut off by the output cap then has no tag at all).
    ``mode="off"``: the content is the final text as it stands. The reasoning is None when there is
    none (or it is blank)."""
    if mode == "off" or not content:
        return content, None
    stripped = content.lstrip()
    for opening, closing in THINK_TAGS:
        if stripped.startswith(opening):
            body = stripped[len(opening):]
            reasoning, found, final = body.partition(closing)
            return (final.lstrip(), reasoning.strip() or None) if found else ("", body.strip() or None)
    ends = [(content.find(closing), closing) for _, closing in THINK_TAGS if closing in content]
    if ends:
        at, closing = min(ends)
        return content[at + len(closing):].lstrip(), content[:at].strip() or None
    if mode == "opened":
        return "", content.strip() or None
    return content, None
