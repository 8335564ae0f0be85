"""Shared test helpers: broker processes, raw wire access, client adapters."""
