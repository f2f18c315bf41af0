"""The pure-Python backend: the same contract as the Rust core, for platforms without a wheel."""
