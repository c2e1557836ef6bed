"""The model client's own cost per request, beside a bare ``openai`` call (not a timed test).

``python benchmarks/client_overhead.py [--calls 200] [--concurrency 8] [--delay 0.05]``

Against the test server (``tests/llm_server.py``, a real HTTP server on 127.0.0.1 answering
MATH-500 prompts), the same prompts are sent by

* **bare**: ``openai.OpenAI(..., max_retries=0).chat.completions.create(...)``, reading the text,
  ``finish_reason`` and ``usage`` from the parsed reply;
* **client**: ``catengine.clients.OpenAIChatClient.complete`` (retry loop, reply parsing, the
  :class:`Completion`), and the same with a ``Budget`` attached.

Calls alternate between the variants (the order flips every round) so that drift of the machine
hits them alike; printed: the median wall time per call of each over ``--calls`` calls, the
median of the paired differences (client - bare), and p90. Then the throughput of 8 threads
sharing one client against a server that takes ``--delay`` seconds per reply, beside 8 threads
sharing one bare ``openai`` client (ideal: concurrency / delay requests per second).

Timings depend on the machine; the numbers in reports were taken on 2 cores shared with other jobs.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from _paths import test_support  # noqa: E402  (also puts tests/real_data.py in sys.modules)

llm_server = test_support("llm_server")

import openai  # noqa: E402

from catengine.clients import Budget, OpenAIChatClient  # noqa: E402

MAX_TOKENS = 10240


def bare_call(client: openai.OpenAI, model: str, prompt: str):
    reply = client.chat.completions.create(model=model, messages=[{"role": "user", "content": prompt}],
                                           max_tokens=MAX_TOKENS)
    choice = reply.choices[0]
    return choice.message.content, choice.finish_reason, reply.usage.completion_tokens


def percentile(values, q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def per_call(server, prompts, calls: int) -> None:
    bare = openai.OpenAI(base_url=server.base_url, api_key="EMPTY", max_retries=0, timeout=30)
    ours = OpenAIChatClient(server.model, base_url=server.base_url, timeout=30)
    budgeted = OpenAIChatClient(server.model, base_url=server.base_url, timeout=30,
                                budget=Budget(max_completion_tokens=10**12, max_cost_usd=1e9,
                                              usd_per_million_input=1.0, usd_per_million_output=1.0))
    variants = {
        "bare openai": lambda p: bare_call(bare, server.model, p),
        "OpenAIChatClient": lambda p: ours.complete(p, max_tokens=MAX_TOKENS),
        "  + Budget": lambda p: budgeted.complete(p, max_tokens=MAX_TOKENS),
    }
    names = list(variants)
    for k in range(20):  # warm up connections and caches
        for name in names:
            variants[name](prompts[k % len(prompts)])
    times = {name: [] for name in names}
    for k in range(calls):
        prompt = prompts[k % len(prompts)]
        for name in (names if k % 2 == 0 else names[::-1]):
            started = time.perf_counter()
            variants[name](prompt)
            times[name].append(time.perf_counter() - started)
    print(f"per request, {calls} calls each (server reply without delay), milliseconds")
    print(f"{'variant':<20}{'median':>10}{'p90':>10}{'median diff vs bare':>22}")
    base = times["bare openai"]
    for name in names:
        diffs = [a - b for a, b in zip(times[name], base)]
        diff = "" if name == "bare openai" else f"{statistics.median(diffs) * 1e3:+.3f}"
        print(f"{name:<20}{statistics.median(times[name]) * 1e3:>10.3f}{percentile(times[name], 0.9) * 1e3:>10.3f}"
              f"{diff:>22}")
    ours.close()
    budgeted.close()
    bare.close()


def throughput(server, prompts, concurrency: int, delay: float, n: int) -> None:
    server.delay = delay
    bare = openai.OpenAI(base_url=server.base_url, api_key="EMPTY", max_retries=0, timeout=30)
    ours = OpenAIChatClient(server.model, base_url=server.base_url, timeout=30)
    print(f"\nthroughput: {n} requests from {concurrency} threads, server reply after {delay * 1e3:.0f} ms "
          f"(ideal {concurrency / delay:.0f} requests/s)")
    for name, call in (("bare openai", lambda p: bare_call(bare, server.model, p)),
                       ("OpenAIChatClient", lambda p: ours.complete(p, max_tokens=MAX_TOKENS))):
        with ThreadPoolExecutor(concurrency) as pool:
            list(pool.map(call, prompts[:concurrency * 2]))   # warm up one connection per thread
            started = time.perf_counter()
            list(pool.map(call, [prompts[k % len(prompts)] for k in range(n)]))
            elapsed = time.perf_counter() - started
        print(f"{name:<20}{n / elapsed:>10.1f} requests/s")
    server.delay = 0.0
    ours.close()
    bare.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--delay", type=float, default=0.05)
    parser.add_argument("--requests", type=int, default=400)
    args = parser.parse_args()
    with llm_server.LLMServer("math500_lart", theta=0.5, seed=0) as server:
        bank = server.llm.banks[0]
        prompts = [bank.prompt(item) for item in bank.item_ids[:100]]
        per_call(server, prompts, args.calls)
        throughput(server, prompts, args.concurrency, args.delay, args.requests)


if __name__ == "__main__":
    main()
