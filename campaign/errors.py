"""The errors a campaign ends with. Library code raises them; only ``__main__`` exits.

``Stop`` derives from BaseException on purpose: Hydra catches ``Exception`` in its task runner, its
callbacks and its error reporter (which would print several lines and exit 1), so a Stop travels
through Hydra untouched to ``campaign.__main__``, which prints its one line and exits with its status.
"""

from __future__ import annotations

from hydra.errors import CompactHydraException

from jobs import interrupts


class ConfigError(CompactHydraException):
    """A setting is wrong; the message names it and says what would be right."""


class Stop(BaseException):
    """End this invocation: ``message`` is the one line a user reads, ``status`` the exit status."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


# A signal (SIGTERM from scancel or kill) asked the campaign to end; raised where unwinding is safe
# (jobs.interrupts), so that tiers and locks unwind, like KeyboardInterrupt for SIGINT.
Interrupted = interrupts.Interrupted
