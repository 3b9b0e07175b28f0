"""Tests of the polyloop-adapters distribution."""
