import sys

from mpbench.cli import main

sys.exit(main())
