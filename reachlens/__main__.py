import sys

from reachlens.cli.main import main

sys.exit(main())
