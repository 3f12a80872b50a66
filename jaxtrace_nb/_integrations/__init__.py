"""Where recording meets the user's tools: the `watch` scope and its guard, IPython magics, the
pytest plugin and its baseline, `python -m jaxtrace_nb run` / `report`.
"""
