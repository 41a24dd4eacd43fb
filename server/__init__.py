"""The HTTP boundary: serving episodes to learners on other machines."""
