"""Telemetry and the performance rules: the `telemetry` time series (node, ts, metric, value); per node
the telemetry predictor's risk, what drove it, and since when its history counts (an undrain starts a
new history); per job the planner's predicted tokens/s and the attempt in which the straggler and
throughput rules last fired (each fires at most once per launch).

Revision ID: 0003_telemetry
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0003_telemetry"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "telemetry",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("node", sa.String(64), nullable=False),
        sa.Column("ts", sa.Float, nullable=False),
        sa.Column("metric", sa.String(64), nullable=False),
        sa.Column("value", sa.Float, nullable=False),
    )
    op.create_index("ix_telemetry_node_ts", "telemetry", ["node", "ts"])
    op.create_index("ix_telemetry_ts", "telemetry", ["ts"])
    with op.batch_alter_table("nodes") as batch:
        batch.add_column(sa.Column("predicted_risk", sa.Float))
        batch.add_column(sa.Column("risk_detail", sa.Text))
        batch.add_column(sa.Column("health_since", sa.Float))
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("predicted_tokens_per_s", sa.Float))
        batch.add_column(sa.Column("straggler_alerted_attempt", sa.Integer, nullable=False, server_default="0"))
        batch.add_column(sa.Column("throughput_alerted_attempt", sa.Integer, nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        for col in ("throughput_alerted_attempt", "straggler_alerted_attempt", "predicted_tokens_per_s"):
            batch.drop_column(col)
    with op.batch_alter_table("nodes") as batch:
        for col in ("health_since", "risk_detail", "predicted_risk"):
            batch.drop_column(col)
    op.drop_index("ix_telemetry_ts", "telemetry")
    op.drop_index("ix_telemetry_node_ts", "telemetry")
    op.drop_table("telemetry")
