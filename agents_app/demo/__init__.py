"""The demo agent that ``make run`` serves."""
