"""`python -m suite.worker`: one cell, or the environment probe, in this process."""

import sys

from suite.worker.cell import main

sys.exit(main())
