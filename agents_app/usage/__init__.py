"""Model usage of each turn (requests, tokens, cost) and the quotas that cap it.

See docs/operations.md#usage-and-quotas.
"""
