"""Shared vocabulary and value forms: how a value reads and is kept, bounded stores, the one
background thread. Imports nothing of the package.
"""
