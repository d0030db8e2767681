"""The API a job's own code uses on the instance: `TrainingSession` and `respot.session()`.

`session` (the class a researcher subclasses) and `notebook` (`respot.session()` inside a
notebook cell, talking to the session process over a Unix socket).
"""
