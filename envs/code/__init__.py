"""``code-v0``: Python programming tasks scored by hidden unit tests in a sandbox."""
