"""Adaptive tests inside the harnesses LLMs are evaluated with (optional; catengine's core never imports these).

* ``catengine.adapters.inspect`` — runs an Inspect AI ``Task`` adaptively, batch by batch through
  Inspect's own ``eval(..., sample_id=...)`` (needs the ``[inspect]`` extra).
* ``catengine.adapters.lm_eval`` — the lm-evaluation-harness file loop, without importing the
  harness: write the next batch as a ``--samples`` file, ingest its ``--log_samples`` output
  (``catengine lm-eval next`` / ``catengine lm-eval ingest``).
"""
