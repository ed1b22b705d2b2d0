"""Launching a job under ctmon: the supervisor process and its helpers."""
