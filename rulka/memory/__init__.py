"""Replay storage for off-policy agents: frames stored once, n-step transitions, the mini-race
collate and prioritized sampling."""
