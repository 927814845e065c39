"""The built-in demo toolset."""

from tools.demo.toolset import demo_tools

__all__ = ["demo_tools"]
