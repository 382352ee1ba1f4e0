"""``python -m edge_agent --site X --sites sites.yaml [--plan plan.json]``."""

from __future__ import annotations

import typer

from edge_agent.cli import agent


def main() -> None:
    """Run the agent command."""
    typer.run(agent)


if __name__ == "__main__":
    main()
