"""Example training scripts shipped with the agent (the demo job uses `tiny_train`)."""
