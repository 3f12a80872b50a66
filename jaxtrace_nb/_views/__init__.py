"""What the user sees: the log as DataFrames, the report model, its text, HTML and widget
renderings, the timeline and where compile time goes.
"""
