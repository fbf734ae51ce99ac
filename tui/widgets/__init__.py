"""The UI's panels (one per module) and its modal screens."""
