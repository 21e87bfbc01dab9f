"""The `v1` command line."""
