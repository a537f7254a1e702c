"""Offline built-in tasks and the tiny base models the quickstart and tests use."""
