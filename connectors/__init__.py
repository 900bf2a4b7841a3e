"""ConnectorV2 pieces and pipelines (env-to-module, module-to-env, learner); filled in by issue #3 and #5."""

__all__: list[str] = []
