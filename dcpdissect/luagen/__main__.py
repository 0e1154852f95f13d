"""``python -m dcpdissect.luagen lua generate|install``."""

import sys

from . import main

sys.exit(main())
