"""Module-to-env pieces: sample actions from the module's outputs, then fit them to the env."""

from connectors.module_to_env.default_pipeline import default_module_to_env
from connectors.module_to_env.get_actions import GetActions
from connectors.module_to_env.normalize_and_clip_actions import NormalizeAndClipActions

__all__ = ["GetActions", "NormalizeAndClipActions", "default_module_to_env"]
