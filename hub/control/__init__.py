"""The hub's control plane: deploying and re-planning apps, their plans and history, the sites and their links."""
