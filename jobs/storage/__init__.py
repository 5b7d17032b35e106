"""Storage tiers: emulated tiers, page-cache control, device locks, the device's own rate (fio, IOR)."""
