"""Isolated execution of untrusted code and queries."""
