"""Reusable toolsets: Python tools (and their objects) that tasksets and harnesses share."""
