"""Moves between sites and to and from the hub: switches, holds, cutoffs, per-site frontiers and settling."""
