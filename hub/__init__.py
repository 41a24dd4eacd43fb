"""Packaging, publishing and installing environments."""
