"""Initial schema: jobs, nodes, audit, tokens.

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "jobs",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("owner", sa.String(64), nullable=False, index=True),
        sa.Column("model", sa.String(200), nullable=False),
        sa.Column("layout", sa.String(200), nullable=False),
        sa.Column("nproc", sa.Integer, nullable=False),
        sa.Column("steps", sa.Integer, nullable=False),
        sa.Column("ckpt", sa.Text, nullable=False),
        sa.Column("priority", sa.Integer, nullable=False),
        sa.Column("train_args", sa.JSON, nullable=False),
        sa.Column("state", sa.String(16), nullable=False, index=True),
        sa.Column("node", sa.String(64)),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("restarts", sa.Integer, nullable=False),
        sa.Column("lr_scale", sa.Float, nullable=False),
        sa.Column("pid", sa.Integer),
        sa.Column("pgid", sa.Integer),
        sa.Column("proc_start", sa.Float),
        sa.Column("cancel_requested", sa.Boolean, nullable=False),
        sa.Column("result", sa.JSON),
        sa.Column("error", sa.Text),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("started_at", sa.Float),
        sa.Column("ended_at", sa.Float),
    )
    op.create_table(
        "nodes",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("slots", sa.Integer, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("risk", sa.Float),
        sa.Column("updated_at", sa.Float, nullable=False),
    )
    op.create_table(
        "audit",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("job_id", sa.Integer, sa.ForeignKey("jobs.id"), index=True),
        sa.Column("node", sa.String(64)),
        sa.Column("rule", sa.String(64), nullable=False),
        sa.Column("detection", sa.Text, nullable=False),
        sa.Column("decision", sa.String(64), nullable=False),
        sa.Column("action", sa.Text, nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("detected_at", sa.Float, nullable=False),
        sa.Column("acted_at", sa.Float, nullable=False),
    )
    op.create_table(
        "tokens",
        sa.Column("sha256", sa.String(64), primary_key=True),
        sa.Column("user", sa.String(64), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
    )


def downgrade() -> None:
    for table in ("tokens", "audit", "nodes", "jobs"):
        op.drop_table(table)
