"""``python -m campaign.capacity``: see ``campaign.capacity.command``."""

import sys

from campaign.capacity.command import main

if __name__ == "__main__":
    from jobs.execution import warm
    from jobs.lifeline import exit_as_python

    warm.zygote()  # where this process was started warm: a copy of it, now, serves its rounds
    exit_as_python(lambda: sys.exit(main()))
