"""`python -m beamalloc.cli`: the same as the `beamalloc` command."""

import sys

from beamalloc.cli.main import main

sys.exit(main())
