"""Adapters that connect PolyLoop's seams to the outside world."""
