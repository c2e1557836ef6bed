"""A MATH500-style Inspect AI task over the shipped ``math500_lart`` bank, and a simulated LLM on
Inspect's ``mockllm/model``: an adaptive Inspect run that works offline.

    from catengine import CATSession, open_item_bank
    from catengine.adapters.inspect import run_adaptive
    from catengine.adapters.examples.inspect_math500 import math500_task, simulated_llm

    bank = open_item_bank("math500_lart")
    session = CATSession(bank, subject="simulated-llm")
    result = run_adaptive(math500_task(bank), session, model=simulated_llm(), k=10)

The task's sample ids are the bank's item ids (``math500/0`` ... ``math500/499``), so
``run_adaptive`` maps items to samples with no ``sample_ids=``. The repository does not ship the
MATH500 problems: without ``problems=`` each sample's input is a placeholder naming its item, which
the simulated LLM reads; pass the real problems (a mapping item id -> (problem, answer), e.g. read
from ``HuggingFaceH4/MATH-500``, split ``test``, in dataset order) to evaluate a real model
(``model=get_model("openai/gpt-4o-mini")`` or any Inspect model).
"""

from __future__ import annotations

from collections.abc import Mapping

from catengine.adapters.examples._simulated import simulated_answer

__all__ = ["math500_task", "simulated_llm"]


def math500_task(bank, problems: Mapping[str, tuple[str, str]] | None = None, *, name: str = "math500"):
    """An Inspect ``Task`` with one sample per bank item (id = item id), scored by Inspect's ``match()``
    (the last number of the output against the target), solved by ``generate()``."""
    from inspect_ai import Task
    from inspect_ai.dataset import MemoryDataset, Sample
    from inspect_ai.scorer import match
    from inspect_ai.solver import generate

    samples = []
    for item in bank.item_ids:
        if problems is None:
            question, answer = f"[{item}] Solve MATH500 problem {item}; end with the final answer.", "42"
        elif item in problems:
            question, answer = problems[item]
        else:
            continue
        samples.append(Sample(input=question, target=str(answer), id=item))
    return Task(dataset=MemoryDataset(samples), solver=generate(), scorer=match(), name=name)


def simulated_llm(skill: float = 0.6):
    """Inspect's ``mockllm/model`` answering the placeholder samples like a model of the given skill:
    the target ("42") when correct, another number otherwise, and its CoT length as the reported
    output tokens (no network, no API key)."""
    from inspect_ai.model import ModelOutput, ModelUsage, get_model

    def answer(messages, tools, tool_choice, config):
        text = messages[-1].text
        item = text[text.index("[") + 1:text.index("]")] if "[" in text and "]" in text else text
        correct, tokens = simulated_answer(item, skill)
        out = ModelOutput.from_content("mockllm/model", f"Reasoning step by step... the answer is {42 if correct else 17}")
        out.usage = ModelUsage(input_tokens=len(text.split()), output_tokens=tokens,
                               total_tokens=len(text.split()) + tokens)
        return out

    return get_model("mockllm/model", custom_outputs=answer, memoize=False)
