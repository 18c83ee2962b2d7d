"""jobs.backend, jobs.backend_id: which backend launched a job, and that backend's id of the launch
(the Slurm job id), so a restarted service re-adopts it by that id.

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("backend", sa.String(16), nullable=True))
        batch.add_column(sa.Column("backend_id", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("backend_id")
        batch.drop_column("backend")
