"""Re-exported from :mod:`catengine.responses.readers.lm_eval_harness`."""

from catengine.responses.readers.lm_eval_harness import *  # noqa: F401,F403
from catengine.responses.readers.lm_eval_harness import read_lm_eval_samples, task_from_filename  # noqa: F401
