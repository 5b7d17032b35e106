"""``python -m campaign.capacity``: see ``campaign.capacity.command``."""

import sys

from campaign.capacity.command import main

if __name__ == "__main__":
    from jobs.lifeline import exit_as_python

    exit_as_python(lambda: sys.exit(main()))
