"""The event log and its persistence: the bounded store every view reads, and one JSON line per
event change on disk.
"""
