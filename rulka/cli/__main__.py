"""``python -m rulka.cli`` is the ``rulka`` command."""

import sys

from rulka.cli import main

sys.exit(main())
