"""What is simulated: the config schema, hardware profiles, deployments and scenarios.

The bottom layer of the simulator: it imports nothing of the other layers.
"""
