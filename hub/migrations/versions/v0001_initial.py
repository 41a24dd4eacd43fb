"""The initial hub schema: owners, tokens, packages, versions, the ledger, check results.

Revision ID: 0001
Revises:
Create Date: 2026-09-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision: str | None = None
branch_labels: str | None = None
depends_on: str | None = None


def _time(name: str, nullable: bool = False) -> sa.Column[object]:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def upgrade() -> None:
    """Create every table of the first schema."""
    op.create_table(
        "owners",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(64), nullable=False),
        _time("created_at"),
        sa.PrimaryKeyConstraint("id", name="pk_owners"),
        sa.UniqueConstraint("name", name="uq_owners_name"),
    )
    op.create_table(
        "tokens",
        sa.Column("id", sa.String(32), nullable=False),
        sa.Column("owner_id", sa.Integer(), nullable=False),
        sa.Column("secret_sha256", sa.String(64), nullable=False),
        sa.Column("scopes", sa.String(64), nullable=False),
        sa.Column("description", sa.String(200), nullable=False),
        _time("created_at"),
        _time("expires_at", nullable=True),
        _time("revoked_at", nullable=True),
        _time("last_used_at", nullable=True),
        sa.ForeignKeyConstraint(["owner_id"], ["owners.id"], name="fk_tokens_owner_id_owners"),
        sa.PrimaryKeyConstraint("id", name="pk_tokens"),
    )
    op.create_index("ix_tokens_owner_id", "tokens", ["owner_id"])
    op.create_table(
        "packages",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("owner_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(100), nullable=False),
        sa.Column("normalized_name", sa.String(100), nullable=False),
        sa.Column("skeleton", sa.String(100), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        _time("created_at"),
        sa.ForeignKeyConstraint(["owner_id"], ["owners.id"],
                                name="fk_packages_owner_id_owners"),
        sa.PrimaryKeyConstraint("id", name="pk_packages"),
        sa.UniqueConstraint("owner_id", "normalized_name",
                            name="uq_packages_owner_id_normalized_name"),
    )
    op.create_index("ix_packages_owner_id", "packages", ["owner_id"])
    op.create_index("ix_packages_skeleton", "packages", ["skeleton"])
    op.create_table(
        "versions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("package_id", sa.Integer(), nullable=False),
        sa.Column("version", sa.String(64), nullable=False),
        sa.Column("canonical_version", sa.String(64), nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("filename", sa.String(255), nullable=False),
        sa.Column("metadata", sa.JSON(), nullable=False),
        sa.Column("env_ids", sa.JSON(), nullable=False),
        _time("uploaded_at"),
        sa.Column("uploaded_by", sa.String(32), nullable=True),
        _time("yanked_at", nullable=True),
        sa.Column("yank_reason", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(["package_id"], ["packages.id"],
                                name="fk_versions_package_id_packages"),
        sa.PrimaryKeyConstraint("id", name="pk_versions"),
        sa.UniqueConstraint("package_id", "canonical_version",
                            name="uq_versions_package_id_canonical_version"),
    )
    op.create_index("ix_versions_package_id", "versions", ["package_id"])
    op.create_index("ix_versions_sha256", "versions", ["sha256"])
    op.create_table(
        "version_ledger",
        sa.Column("owner_name", sa.String(64), nullable=False),
        sa.Column("normalized_name", sa.String(100), nullable=False),
        sa.Column("canonical_version", sa.String(64), nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False),
        _time("recorded_at"),
        _time("deleted_at", nullable=True),
        sa.Column("delete_reason", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("owner_name", "normalized_name", "canonical_version",
                                name="pk_version_ledger"),
    )
    op.create_table(
        "check_results",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("version_id", sa.Integer(), nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("details", sa.JSON(), nullable=False),
        _time("checked_at"),
        sa.CheckConstraint("status IN ('failed', 'passed', 'unchecked')",
                           name="ck_check_results_status_known"),
        sa.ForeignKeyConstraint(["version_id"], ["versions.id"],
                                name="fk_check_results_version_id_versions"),
        sa.PrimaryKeyConstraint("id", name="pk_check_results"),
    )
    op.create_index("ix_check_results_version_id", "check_results", ["version_id"])


def downgrade() -> None:
    """Drop every table, children first. The ledger goes too: this is for empty hubs."""
    op.drop_index("ix_check_results_version_id", table_name="check_results")
    op.drop_table("check_results")
    op.drop_table("version_ledger")
    op.drop_index("ix_versions_sha256", table_name="versions")
    op.drop_index("ix_versions_package_id", table_name="versions")
    op.drop_table("versions")
    op.drop_index("ix_packages_skeleton", table_name="packages")
    op.drop_index("ix_packages_owner_id", table_name="packages")
    op.drop_table("packages")
    op.drop_index("ix_tokens_owner_id", table_name="tokens")
    op.drop_table("tokens")
    op.drop_table("owners")
