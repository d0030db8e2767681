"""The researcher's client and its views, on the laptop.

`handle` (`run()` and `JobHandle`), `status` (`JobStatus`), `progress` (the live bar),
`logs`, `plot` (the timeline picture), `pull` (results back, verified), `rerun`, and how a
laptop finds its deployment (`deployment`, `localstate` for `respot local up`).
"""
