"""Prometheus metrics: the table (catalog), one module per feature, and the scrape-time collector."""
