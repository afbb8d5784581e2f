"""One module per config section, each owned by the feature that reads it."""
