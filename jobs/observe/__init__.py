"""What a run observes besides its own timing: CPU and device usage, the device trace, POSIX calls,
provenance."""
