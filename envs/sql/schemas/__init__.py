"""Fixture database schemas: SQLAlchemy tables plus seeded data generators."""
