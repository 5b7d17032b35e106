"""The errors a campaign ends with. Library code raises them; only ``__main__`` exits.

``Stop`` derives from BaseException on purpose: Hydra catches ``Exception`` in its task runner, its
callbacks and its error reporter (which would print several lines and exit 1), so a Stop travels
through Hydra untouched to ``campaign.__main__``, which prints its one line and exits with its status.
"""

from __future__ import annotations

from jobs import interrupts
from jobs.errors import ConfigError

__all__ = ["ConfigError", "Interrupted", "Stop"]


class Stop(BaseException):
    """End this invocation: ``message`` is the one line a user reads, ``status`` the exit status."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


# A signal (SIGTERM from scancel or kill) asked the campaign to end; raised where unwinding is safe
# (jobs.interrupts), so that tiers and locks unwind, like KeyboardInterrupt for SIGINT.
Interrupted = interrupts.Interrupted
