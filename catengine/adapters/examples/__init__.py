"""Small, offline examples of the harness adapters (no provider, no download, no harness needed).

* :mod:`~catengine.adapters.examples.inspect_math500`: a MATH500-style Inspect AI task whose sample
  ids are the shipped ``math500_lart`` bank's item ids, and a simulated LLM on Inspect's own
  ``mockllm/model`` (docs/harnesses.md, "Inspect AI").
* :mod:`~catengine.adapters.examples.lm_eval_stand_in`: ``python -m
  catengine.adapters.examples.lm_eval_stand_in --samples samples.json --output_path out/`` writes
  what ``lm_eval --samples ... --log_samples`` writes, for a simulated model, so the ``catengine
  lm-eval`` loop can be rehearsed offline (docs/harnesses.md, "lm-evaluation-harness").
"""
