"""ml_collections presets: one file per experiment, get_config(arg) with :quick and :paper."""
