"""The `v1` command line."""

__all__: list[str] = []
