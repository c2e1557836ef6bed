"""``python -m catengine.cli``: the ``catengine`` command."""

import sys

from catengine.cli.app import main

sys.exit(main())
