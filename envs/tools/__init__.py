"""Tool-calling environments (:mod:`.base`) and the ``tools-v0`` workplace world.

``gymhub.envs.tools`` keeps exporting the ``ToolEnv`` machinery it always did; the
``tools-v0`` environment lives in the submodules (:mod:`.env` and what it uses), which
are imported only when that environment is made.
"""

from .base import MAX_CALLS_PER_TURN, Final, ToolDef, ToolEnv, ToolError, tool

__all__ = ["MAX_CALLS_PER_TURN", "Final", "ToolDef", "ToolEnv", "ToolError", "tool"]
