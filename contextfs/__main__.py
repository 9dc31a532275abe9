import sys

from contextfs.cli import main

sys.exit(main())
