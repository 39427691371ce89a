"""Platforms that can take a notebook environment down and bring it back."""
