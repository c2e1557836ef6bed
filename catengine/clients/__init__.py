"""Model clients: one contract (:class:`ModelClient`) for putting a bank's questions to an LLM.

* :class:`OpenAIChatClient`: any OpenAI-compatible chat-completions endpoint (``openai`` package);
* :class:`InspectModelClient`: any Inspect AI model (needs the ``[inspect]`` extra);
* :class:`Budget`: caps on requests, completion tokens and spend, shared by clients and threads;
* :class:`RetryPolicy`: which failures are retried and how long a client waits in between.

The two clients load on first use, so importing this package imports neither ``openai`` nor
``inspect_ai``.
"""

from catengine.clients.base import Completion, EndpointError, ModelClient
from catengine.clients.budget import Budget, BudgetExceeded, BudgetSpent
from catengine.clients.retry import RetryPolicy
from catengine.lazy import lazy_attributes

__all__ = ["Budget", "BudgetExceeded", "BudgetSpent", "Completion", "EndpointError", "InspectModelClient",
           "ModelClient", "OpenAIChatClient", "RetryPolicy"]

_LAZY = {"OpenAIChatClient": "catengine.clients.openai_chat", "InspectModelClient": "catengine.clients.inspect_model"}

__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, __all__)
