"""The wire: what events are, and how bytes become them.

``events`` is the one typed definition of every event kind; ``decode`` turns
lines into those types where bytes enter a viewer-side process (recordings,
the viewer socket, the supervisor's agent socket). See docs/PROTOCOL.md.
"""
