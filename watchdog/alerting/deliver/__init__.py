"""The deliver stage: the durable outbox (SQLite, committed before any send), one sender per
channel, and the channels, one module per vendor, each with its own config model."""
