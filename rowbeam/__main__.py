"""python -m rowbeam ... (same as the `rowbeam` command)."""
import sys

from .cli import main

sys.exit(main())
