"""`python -m tether_agent run -- CMD...`."""

import sys

from tether_agent.main import main

sys.exit(main())
