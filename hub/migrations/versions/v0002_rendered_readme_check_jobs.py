"""READMEs rendered once at publish time, and the check queue kept in the database.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision: str | None = "0001"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    """Add ``versions.readme_html`` and the ``check_jobs`` table."""
    op.add_column("versions", sa.Column("readme_html", sa.Text(), nullable=True))
    op.create_table(
        "check_jobs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("version_id", sa.Integer(), nullable=False),
        sa.Column("owner_id", sa.Integer(), nullable=False),
        sa.Column("enqueued_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("claimed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("claimed_by", sa.String(64), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["version_id"], ["versions.id"],
                                name="fk_check_jobs_version_id_versions"),
        sa.ForeignKeyConstraint(["owner_id"], ["owners.id"],
                                name="fk_check_jobs_owner_id_owners"),
        sa.PrimaryKeyConstraint("id", name="pk_check_jobs"),
        sa.UniqueConstraint("version_id", name="uq_check_jobs_version_id"),
    )
    op.create_index("ix_check_jobs_owner_id", "check_jobs", ["owner_id"])


def downgrade() -> None:
    """Drop the queue and the rendered READMEs (they are re-rendered from the wheels)."""
    op.drop_index("ix_check_jobs_owner_id", table_name="check_jobs")
    op.drop_table("check_jobs")
    with op.batch_alter_table("versions") as batch:
        batch.drop_column("readme_html")
