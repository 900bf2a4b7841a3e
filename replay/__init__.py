"""The episode replay buffer, the ReplayActor and Parquet persistence; filled in by issue #4."""

__all__: list[str] = []
