"""``user`` (rulka's own): free-form user fields."""

from __future__ import annotations

from typing import Annotated

from pydantic import (
    Field,
)

from rulka.config.sections.common import Section


class UserConfig(Section):
    """Machine-specific values, usually from .env (guide: User-specific settings)."""

    username: str = "Player"
    """TrackMania account / profile name."""
    trackmania_base_path: str = "~/Documents/TrackMania"
    """TrackMania user folder."""
    target_python_link_path: str = "~/Documents/TMInterface/Plugins/RulkaLink.as"
    """Where `rulka tm install-plugin` puts rulka's TMInterface plugin (its folder is TMInterface's plugin folder)."""
    base_tmi_port: Annotated[int, Field(ge=1, le=65535)] = 8478
    """First TMInterface port (one per game instance)."""
    linux_launch_game_path: str | None = None
    """Script that starts the game on Linux."""
    windows_tmloader_path: str = "~/AppData/Local/TMLoader/TMLoader.exe"
    """TMLoader executable on Windows."""
    windows_tmloader_profile_name: str = "default"
    """TMLoader profile."""
