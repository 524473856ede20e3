"""Hydra entry points (placeholder while the stages land)."""
