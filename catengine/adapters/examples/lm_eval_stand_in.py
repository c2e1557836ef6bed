"""A stand-in for ``lm_eval --samples FILE --log_samples --output_path DIR``: writes the
``samples_<task>_<timestamp>.jsonl`` files the harness would, for a simulated model, so the
``catengine lm-eval next / ingest`` loop runs offline with neither the harness nor a model.

    python -m catengine.adapters.examples.lm_eval_stand_in --samples samples.json --output_path out/

The files follow lm_eval/evaluator.py: the selected documents of each task are logged in dataset
order under ``doc_id = indices[k]``, one line per document, with the metric (``exact_match``) as a
top-level field and the generation's token count as ``output_tokens``. ``--item-id`` (default
``math500/{doc_id}``) names the simulated answers, so they match ``catengine lm-eval --item-id``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from catengine.adapters.examples._simulated import simulated_answer


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m catengine.adapters.examples.lm_eval_stand_in", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--samples", required=True, help="the --samples mapping (a JSON file or inline JSON)")
    p.add_argument("--output_path", required=True, type=Path)
    p.add_argument("--model_name", default="simulated-llm", help="subdirectory of --output_path (as the harness's model name)")
    p.add_argument("--item-id", default="math500/{doc_id}", help="item id template of the simulated answers")
    p.add_argument("--skill", type=float, default=0.6)
    args = p.parse_args(argv)
    text = Path(args.samples).read_text() if Path(args.samples).is_file() else args.samples
    samples = json.loads(text)
    out = args.output_path / args.model_name
    out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y-%m-%dT%H-%M-%S") + f".{time.time_ns() % 1_000_000:06d}"
    for task, indices in samples.items():
        chosen = set(indices)
        lines = []
        for k, doc in enumerate(sorted(chosen)):  # dataset order; logged under indices[k]
            doc_id = indices[k]
            correct, tokens = simulated_answer(args.item_id.format(task=task, doc_id=doc), args.skill)
            reply = f"Reasoning step by step... the answer is {42 if correct else 17}"
            lines.append(json.dumps({
                "doc_id": doc_id, "doc": {"index": doc}, "target": "42", "arguments": {"gen_args_0": {"arg_0": f"Problem {doc}"}},
                "resps": [[reply]], "filtered_resps": [str(42 if correct else 17)], "filter": "none",
                "metrics": ["exact_match"], "exact_match": float(correct), "output_tokens": tokens,
            }))
        (out / f"samples_{task}_{stamp}.jsonl").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
