"""Hostile pull requests played against the trusted merge gate and CI: each attack is caught or has no effect."""
