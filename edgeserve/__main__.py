import sys

from edgeserve.cli.main import main

sys.exit(main())
