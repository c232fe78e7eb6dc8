"""The embedded demo: a synthetic language pair and the job that trains on it."""
