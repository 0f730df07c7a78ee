"""Studies: the measurements behind each experiment, as library functions (compute + plot)."""
