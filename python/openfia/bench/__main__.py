"""`python -m openfia.bench`: see openfia.bench.cli (--help)."""
import sys

from .cli import main

sys.exit(main())
