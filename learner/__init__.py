"""Learner, LearnerGroup and the built-in algorithms; filled in by issue #5."""

__all__: list[str] = []
