"""Side-by-side performance measurements (never timed tests)."""
