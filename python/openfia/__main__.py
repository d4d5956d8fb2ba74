"""`python -m openfia`: the command line (openfia._cli; `python -m openfia --help`)."""
import sys

from ._cli import main

if __name__ == "__main__":
    sys.exit(main())
