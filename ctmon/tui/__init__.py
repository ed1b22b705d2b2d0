"""The live terminal UI (Textual). Never imports torch: it reads the store."""

from ctmon.tui.app import AppResult, CtmonApp

__all__ = ["AppResult", "CtmonApp"]
