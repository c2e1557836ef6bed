"""``catengine run``'s own cost per item and throughput, and the coverage of its interval over
simulated LLMs (not timed tests).

``python benchmarks/runner.py overhead [--items 60] [--reps 3]``
``python benchmarks/runner.py throughput [--items 120] [--delay 0.05] [--concurrency 8]``
``python benchmarks/runner.py coverage [--bank math500_lart] [--thetas -1,0,1,2] [--seeds 10]``

All against the test server (``tests/llm_server.py``: a real HTTP server on 127.0.0.1 answering the
bank's questions like an LLM of known trait, through the real ``openai`` client).

* **overhead**: the same items asked one at a time (concurrency 1, replies at once) by
  ``run_model`` (selection, prompt, request, grading, MAP update, one fsync-ed log line) and by a
  bare ``openai`` loop over the same prompts (request only); printed: the wall time per item of
  each, side by side, their difference (the runner's own cost per item) and the ratio. Each
  repetition runs both in the same process, the order alternating.
* **throughput**: items per second of ``run_model`` at ``--concurrency`` with every reply taking
  ``--delay`` seconds (ideal: concurrency / delay), beside a bare threaded ``openai`` loop; the
  endpoint runs in a process of its own, as a real one does. Each repetition is a new process that
  runs twice: the first run pays the process's one-off costs (math-verify's parser builds its
  prediction tables over its first parses), the second shows the steady rate.
* **coverage**: simulated LLMs at several traits, ``--seeds`` LLMs each (their answers drawn from
  the bank's model at that trait), each run with every default (the default stopping rule); the
  share of runs whose 95% interval holds the LLM's realised accuracy on all the bank's items, the
  mean absolute error, and the items used.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from _paths import test_support  # noqa: E402  (also puts tests/real_data.py in sys.modules)

llm_server = test_support("llm_server")

import openai  # noqa: E402

from catengine import open_item_bank  # noqa: E402
from catengine.clients import OpenAIChatClient  # noqa: E402
from catengine.runner import run_model  # noqa: E402
from catengine.stopping import MaxItems  # noqa: E402


def _bare(server, prompts, concurrency=1):
    client = openai.OpenAI(base_url=server.base_url, api_key="EMPTY", max_retries=0)

    def ask(prompt):
        reply = client.chat.completions.create(model=server.model, messages=[{"role": "user", "content": prompt}],
                                               max_tokens=10240)
        return reply.choices[0].message.content

    t0 = time.perf_counter()
    if concurrency == 1:
        for p in prompts:
            ask(p)
    else:
        with ThreadPoolExecutor(concurrency) as pool:
            list(pool.map(ask, prompts))
    return time.perf_counter() - t0


class ConstantGrader:
    """A grader that reads nothing (every reply correct): isolates the runner's own cost from grading's."""

    name, version = "constant", "1"

    def grade(self, text, item):
        from catengine.grading import Grade

        return Grade(True, None, "constant")


def _run(server, bank, n_items, concurrency, seed=1, grader=None):
    client = OpenAIChatClient(server.model, base_url=server.base_url)
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        result = run_model(bank, client, log=Path(tmp) / "run.jsonl", concurrency=concurrency,
                           stopping=MaxItems(n_items), seed=seed, grader=grader)
        seconds = time.perf_counter() - t0
    return seconds, result


def overhead(args):
    bank = open_item_bank(args.bank)
    with llm_server.LLMServer(bank, theta=0.5, seed=1) as server:
        _run(server, bank, 5, 1)  # warm: compile, open, first requests
        rows = []
        for rep in range(args.reps):
            row = []
            for grader in (ConstantGrader(), None):
                seconds, result = _run(server, bank, args.items, 1, seed=rep + 2, grader=grader)
                prompts = [bank.prompt(r.item) for r in result.session.history]
                row += [seconds / result.session.n_items, _bare(server, prompts) / len(prompts)]
            rows.append(row)
    print(f"{args.bank}: {args.items} items per repetition, concurrency 1, replies at once; ms per item")
    print(f"{'rep':>4} {'run, no grading':>16} {'bare':>6} {'runner':>7}   {'run, bank grader':>17} {'bare':>6} {'runner':>7}")
    for k, (r0, b0, r1, b1) in enumerate(rows):
        print(f"{k:>4} {1e3 * r0:>16.2f} {1e3 * b0:>6.2f} {1e3 * (r0 - b0):>7.2f}   {1e3 * r1:>17.2f} {1e3 * b1:>6.2f} "
              f"{1e3 * (r1 - b1):>7.2f}")
    print(f"median runner cost per item: {1e3 * statistics.median(r[0] - r[1] for r in rows):.2f} ms without grading, "
          f"{1e3 * statistics.median(r[2] - r[3] for r in rows):.2f} ms with the bank's grader")


def _throughput_in_this_process(args):
    """Child of :func:`throughput`: a fresh process runs ``--grader`` twice (different seeds) and
    prints the two rates and the bare loop's as one JSON line."""
    import json

    bank = open_item_bank(args.bank)
    grader = ConstantGrader() if args.grader == "none" else None
    # the endpoint in a process of its own, as a real one is (in this process it would share the GIL)
    with llm_server.ServerProcess(args.bank, theta=0.5, seed=1, delay=args.delay) as server:
        rates = []
        for seed in (1, 2):
            seconds, result = _run(server, bank, args.items, args.concurrency, seed=seed, grader=grader)
            rates.append(result.session.n_items / seconds)
        prompts = [bank.prompt(r.item) for r in result.session.history]
        bare = len(prompts) / _bare(server, prompts, args.concurrency)
    print(json.dumps({"first": rates[0], "second": rates[1], "bare": bare}))


def throughput(args):
    import json
    import subprocess

    rows = {}
    for label, grader in (("no grading", "none"), ("the bank's grader", "bank")):
        for rep in range(args.reps):
            out = subprocess.run([sys.executable, __file__, "_throughput_once", "--bank", args.bank, "--items",
                                  str(args.items), "--delay", str(args.delay), "--concurrency", str(args.concurrency),
                                  "--grader", grader], check=True, capture_output=True, text=True).stdout
            rows.setdefault(label, []).append(json.loads(out.strip().splitlines()[-1]))
    print(f"{args.bank}: {args.items} items per run, concurrency {args.concurrency}, {1e3 * args.delay:.0f} ms per "
          f"reply (ideal {args.concurrency / args.delay:.0f} items/s); each repetition a new process running twice")
    print(f"{'':>20} {'first run (items/s)':>20} {'second run':>11} {'bare openai':>12} {'first/bare':>11} {'second/bare':>12}")
    for label, reps in rows.items():
        first, second, bare = (statistics.median(r[k] for r in reps) for k in ("first", "second", "bare"))
        print(f"{label:>20} {first:>20.1f} {second:>11.1f} {bare:>12.1f} {first / bare:>11.2f} {second / bare:>12.2f}")


def coverage(args):
    import numpy as np

    bank = open_item_bank(args.bank)
    thetas = [float(t) for t in args.thetas.split(",")]
    print(f"{args.bank}: every default; {args.seeds} simulated LLMs per trait")
    print(f"{'theta':>6} {'true acc':>9} {'cover':>6} {'MAE':>6} {'items':>6}")
    total = []
    for theta in thetas:
        hits, errs, items, accs = [], [], [], []
        for seed in range(args.seeds):
            with llm_server.LLMServer(bank, theta=theta, seed=1000 + seed) as server:
                client = OpenAIChatClient(server.model, base_url=server.base_url)
                with tempfile.TemporaryDirectory() as tmp:
                    result = run_model(bank, client, log=Path(tmp) / "run.jsonl", concurrency=args.concurrency,
                                       seed=seed)
                truth = server.llm.true_accuracy(bank)
            score = result.session.predicted_score()
            hits.append(score.low <= truth <= score.high)
            errs.append(abs(score.accuracy - truth))
            items.append(result.session.n_items)
            accs.append(truth)
        total += hits
        print(f"{theta:>+6.1f} {np.mean(accs):>9.3f} {np.mean(hits):>6.2f} {np.mean(errs):>6.3f} {np.median(items):>6.0f}")
    print(f"all: coverage {np.mean(total):.3f} over {len(total)} runs")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    o = sub.add_parser("overhead")
    o.add_argument("--items", type=int, default=60)
    o.add_argument("--reps", type=int, default=3)
    t = sub.add_parser("throughput")
    t.add_argument("--items", type=int, default=120)
    t.add_argument("--delay", type=float, default=0.05)
    t.add_argument("--concurrency", type=int, default=8)
    t.add_argument("--reps", type=int, default=3)
    once = sub.add_parser("_throughput_once")  # one fresh process of `throughput`
    once.add_argument("--items", type=int, default=120)
    once.add_argument("--delay", type=float, default=0.05)
    once.add_argument("--concurrency", type=int, default=8)
    once.add_argument("--grader", choices=("none", "bank"), default="bank")
    c = sub.add_parser("coverage")
    c.add_argument("--thetas", default="-1,0,1,2")
    c.add_argument("--seeds", type=int, default=10)
    c.add_argument("--concurrency", type=int, default=8)
    for p in (o, t, once, c):
        p.add_argument("--bank", default="math500_2pl")
    args = parser.parse_args(argv)
    {"overhead": overhead, "throughput": throughput, "_throughput_once": _throughput_in_this_process,
     "coverage": coverage}[args.what](args)


if __name__ == "__main__":
    main()
