"""A Python program that imports nothing ctmon watches: run as `python -I`
(isolated: no PYTHONPATH, so no ctmon hook) it reports nothing to ctmon."""

print("ok")
