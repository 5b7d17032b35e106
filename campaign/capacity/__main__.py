"""``python -m campaign.capacity``: see ``campaign.capacity.command``."""

import sys

from campaign.capacity.command import main

if __name__ == "__main__":
    sys.exit(main())
