"""Reports built from the store: JSON (stable, documented: ctmon/report/build.py), text, Markdown,
and the CI gate."""
