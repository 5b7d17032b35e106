"""report.html: one self-contained page per campaign folder, its sections and HTML tables."""
