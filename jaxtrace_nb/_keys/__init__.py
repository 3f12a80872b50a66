"""What a call's cache key is made of, in the user's names: signatures, leaves, the argument walk,
call sites, lowering keys, the records the recorder hands on.
"""
