"""``python -m worker.cli``: the ``parley`` command without its console script."""

import sys

from worker.cli import main

sys.exit(main())
